package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// probeHelp is the help of `redlockd probe`.
const probeHelp = `Usage: redlockd probe [--url URL] [--timeout 2s] [--insecure]

Sends GET URL and exits 0 if the answer is 2xx, else 1 with the reason on
stderr: the HEALTHCHECK of a container image with no shell or curl. Without
--url it probes /healthz on loopback at the port of REDLOCKD_LISTEN (default
8080), over HTTPS without verifying the certificate when REDLOCKD_TLS_CERT is
set.

Flags:
  --url URL          URL to probe, e.g. http://127.0.0.1:8080/readyz
  --timeout DURATION give up after this long (default 2s)
  --insecure         do not verify the server's TLS certificate

Exit status: 0 healthy, 1 unhealthy or unreachable, 64 usage error.
`

// runProbe is `redlockd probe`.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rawURL := fs.String("url", "", "")
	timeout, insecure := 2*time.Second, false
	fs.Var((*duration)(&timeout), "timeout", "")
	fs.Var((*onOff)(&insecure), "insecure", "")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, probeHelp)
			return exitOK
		}
		return usage(stderr, fmt.Errorf("probe: %w", err))
	}
	if fs.NArg() > 0 {
		return usage(stderr, fmt.Errorf("probe takes no arguments, got %q", redactURL(fs.Arg(0))))
	}
	if timeout <= 0 {
		return usage(stderr, fmt.Errorf("probe: --timeout %v must be positive", timeout))
	}
	target := *rawURL
	if target == "" {
		var err error
		if target, err = localHealthURL(lookupEnv); err != nil {
			return usage(stderr, fmt.Errorf("probe: %w", err))
		}
		insecure = insecure || strings.HasPrefix(target, "https:") // a loopback address is not the certificate's
	} else if u, err := url.Parse(target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usage(stderr, fmt.Errorf("probe: --url %q must be an http:// or https:// URL", redactURL(target)))
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: insecure}
	tr.Proxy = nil
	c := &http.Client{Transport: tr}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return usage(stderr, fmt.Errorf("probe: %w", err))
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "redlockd: probe: %v\n", err)
		return exitFailure
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "redlockd: probe: GET %s: %s\n", req.URL.Redacted(), resp.Status)
		return exitFailure
	}
	return exitOK
}

// localHealthURL returns the /healthz URL of the gateway configured by the
// REDLOCKD_LISTEN and REDLOCKD_TLS_CERT environment variables, on loopback.
func localHealthURL(lookupEnv func(string) (string, bool)) (string, error) {
	v, _ := lookupEnv(envName("listen"))
	listen := cmp.Or(v, DefaultConfig().Listen)
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "0" {
		return "", fmt.Errorf("%s %q: give --url (cannot tell the port)", envName("listen"), listen)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	scheme := "http"
	if v, ok := lookupEnv(envName("tls-cert")); ok && v != "" {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port), Path: "/healthz"}).String(), nil
}
