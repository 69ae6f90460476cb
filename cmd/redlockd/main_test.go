package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// logBuffer is an io.Writer safe for the concurrent writes of the logger and
// the reads of the test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the JSON log lines written so far.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// find returns the first log line with the given message, or nil.
func (b *logBuffer) find(t *testing.T, msg string) map[string]any {
	t.Helper()
	for _, l := range b.lines(t) {
		if l["message"] == msg {
			return l
		}
	}
	return nil
}

// The tests' clocks: a gateway's node timeout that its nodes (in dev mode,
// in this very process) meet on a loaded machine, and how long a test
// awaits an event.
const (
	testNodeTimeout = 2 * time.Second
	patience        = 10 * time.Second
)

// eventually polls cond until it holds, or fails the test after patience.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(patience); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// openDevMain opens a Main in dev mode on 127.0.0.1:0, with node timeout
// testNodeTimeout, and returns it with its log. It is closed at the end of
// the test.
func openDevMain(t *testing.T, edit func(*Config)) (*Main, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	m := NewMain()
	m.Config.Listen = "127.0.0.1:0"
	m.Config.LogLevel = "debug"
	m.Config.NodeTimeout = testNodeTimeout
	if edit != nil {
		edit(&m.Config)
	}
	m.Stderr = logs
	if err := m.Open(); err != nil {
		t.Fatalf("open: %v\nlogs:\n%s", err, logs)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, logs
}

// runMain runs m until the returned cancel is called; wait returns Run's error.
func runMain(t *testing.T, m *Main) (cancel func(), wait func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(cancel)
	return cancel, func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return after cancel")
			return nil
		}
	}
}

func post(t *testing.T, c *http.Client, url, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return resp, m
}

func TestMainDevMode(t *testing.T) {
	m, logs := openDevMain(t, nil)
	addr := m.Addr()
	if addr == "" || !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("Addr() = %q", addr)
	}

	// The "listening" line the black-box tests parse.
	l := logs.find(t, "listening")
	if l == nil {
		t.Fatalf("no listening line in:\n%s", logs)
	}
	if l["level"] != "info" || l["addr"] != addr {
		t.Fatalf("listening line %v, want level info and addr %s", l, addr)
	}
	// Dev mode says so loudly, and logs the nodes and the quorum.
	if w := logs.find(t, "redlock cluster"); w == nil || w["quorum"] != float64(3) || w["n"] != float64(5) {
		t.Errorf("cluster line: %v", w)
	}
	if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "NOTHING IS DURABLE OR FAULT TOLERANT") {
		t.Errorf("no dev mode warning in:\n%s", logs)
	}
	if strings.Contains(logs.String(), "anyone who can reach this port") {
		t.Error("non-loopback warning on 127.0.0.1")
	}

	cancel, wait := runMain(t, m)
	c := &http.Client{Timeout: 10 * time.Second}
	base := "http://" + addr

	resp, body := post(t, c, base+"/locks/demo", "")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /locks/demo: %d %v", resp.StatusCode, body)
	}
	token, _ := body["token"].(string)
	if len(token) < 22 {
		t.Fatalf("token %q in %v", token, body)
	}
	if strings.Contains(logs.String(), token) {
		t.Error("the token appears in the logs")
	}
	resp, body = post(t, c, base+"/locks/demo", "")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("second POST /locks/demo: %d %v, want 409", resp.StatusCode, body)
	}

	cancel()
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("still accepting connections after shutdown")
	}
	if logs.find(t, "shutting down") == nil || logs.find(t, "stopped") == nil {
		t.Errorf("no shutdown lines in:\n%s", logs)
	}
	if err := m.Close(); err != nil { // idempotent
		t.Fatalf("second Close: %v", err)
	}
}

// TestMainShutdownWakesWaiters checks the graceful shutdown order: a request
// waiting for a held lock gets 503 shutting-down at once, not a cut
// connection and not a wait until the shutdown timeout.
func TestMainShutdownWakesWaiters(t *testing.T) {
	m, _ := openDevMain(t, nil)
	m.ShutdownTimeout = 10 * time.Second
	cancel, wait := runMain(t, m)
	c := &http.Client{Timeout: 20 * time.Second}
	url := "http://" + m.Addr() + "/locks/busy"

	if resp, body := post(t, c, url, ""); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first POST: %d %v", resp.StatusCode, body)
	}
	type result struct {
		status int
		ctype  string
		body   map[string]any
		err    error
	}
	waiter := make(chan result, 1)
	go func() {
		resp, err := c.Post(url, "application/json", strings.NewReader(`{"wait_ms":30000}`))
		if err != nil {
			waiter <- result{err: err}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		waiter <- result{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: body}
	}()
	eventually(t, "the waiting POST to wait", func() bool { return m.coord.Stats().Waiting == 1 })

	start := time.Now()
	cancel()
	var r result
	select {
	case r = <-waiter:
	case <-time.After(patience):
		t.Fatal("the waiter was not answered at shutdown")
	}
	if r.err != nil {
		t.Fatalf("waiter: %v (a cut connection, want 503)", r.err)
	}
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("waiter: %d %v, want 503", r.status, r.body)
	}
	if typ, _ := r.body["type"].(string); typ != "urn:redlockd:problem:shutting-down" {
		t.Errorf("waiter problem type %q (content type %q), want urn:redlockd:problem:shutting-down", typ, r.ctype)
	}
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d >= m.ShutdownTimeout {
		t.Errorf("shutdown took %v: it waited for the shutdown timeout", d)
	}
}

// TestRunServe runs the serve command as main does, finds the port the way
// the black-box tests do (the "listening" line on stderr), and stops it by
// cancelling the context, as SIGTERM does: exit status 0.
func TestRunServe(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	logs := &logBuffer{}
	code := make(chan int, 1)
	nodeTimeout := "--node-timeout=" + testNodeTimeout.String()
	go func() {
		// At warn level, the warning about a non-loopback address comes
		// right after where the info line "listening" would be.
		code <- run(ctx, []string{"serve", "--listen", "0.0.0.0:0", nodeTimeout}, io.Discard, logs,
			env(map[string]string{"REDLOCKD_LOG_LEVEL": "warn"}))
	}()
	eventually(t, "the warning about listening beyond loopback", func() bool {
		return strings.Contains(logs.String(), "listening beyond loopback")
	})
	if strings.Contains(logs.String(), `"listening"`) {
		t.Errorf("info line logged at --log-level warn:\n%s", logs)
	}
	cancel()
	select {
	case c := <-code:
		if c != exitOK {
			t.Fatalf("exit %d, want 0; stderr:\n%s", c, logs)
		}
	case <-time.After(patience):
		t.Fatal("serve did not stop")
	}

	// Default level: find the port from the listening line.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	logs = &logBuffer{}
	go func() { code <- run(ctx, []string{"--listen", "127.0.0.1:0", nodeTimeout}, io.Discard, logs, env(nil)) }()
	var addr string
	eventually(t, "the listening line", func() bool {
		if l := logs.find(t, "listening"); l != nil {
			addr, _ = l["addr"].(string)
		}
		return addr != ""
	})
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz: %d, want 200", resp.StatusCode)
	}
	cancel()
	if c := <-code; c != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", c, logs)
	}
}

func TestMainOpenErrors(t *testing.T) {
	// A configuration error is a *UsageError and starts nothing.
	m := NewMain()
	m.Config.LogLevel = "loud"
	m.Stderr = io.Discard
	var ue *UsageError
	if err := m.Open(); !errors.As(err, &ue) {
		t.Fatalf("want *UsageError, got %v", err)
	}

	// A busy port is a runtime error, and what was started is stopped.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	m = NewMain()
	m.Config.Listen = ln.Addr().String()
	m.Stderr = io.Discard
	err = m.Open()
	if err == nil || errors.As(err, &ue) {
		t.Fatalf("want a runtime error, got %v", err)
	}
	if m.dev != nil || m.coord != nil {
		t.Fatal("dev nodes or coordinator left running after a failed Open")
	}
	var stderr logBuffer // the logger and go-redis's write at once
	if c := run(t.Context(), []string{"--listen", ln.Addr().String()}, io.Discard, &stderr, env(nil)); c != exitFailure {
		t.Fatalf("exit %d, want %d", c, exitFailure)
	}
	if !strings.Contains(stderr.String(), "address already in use") {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// TestMainDebugListen checks that --debug-listen serves pprof, and nothing
// else, on its own listener, which stops with Main, and that the API
// listener has no /debug/pprof.
func TestMainDebugListen(t *testing.T) {
	m, logs := openDevMain(t, func(c *Config) { c.DebugListen = "127.0.0.1:0" })
	line := logs.find(t, "debug listening: pprof on /debug/pprof/")
	if line == nil || line["level"] != "info" {
		t.Fatalf("no info line for the debug listener:\n%s", logs)
	}
	debug := "http://" + line["addr"].(string)
	for path, want := range map[string]int{
		"/debug/pprof/":                  http.StatusOK,
		"/debug/pprof/goroutine?debug=1": http.StatusOK,
		"/debug/pprof/symbol":            http.StatusOK,
		"/debug/pprof/cmdline":           http.StatusNotFound, // may hold a Redis password
		"/debug/vars":                    http.StatusNotFound, // so may expvar's copy
		"/healthz":                       http.StatusNotFound,
		"/locks/x":                       http.StatusNotFound,
	} {
		if got := getStatus(t, debug+path); got != want {
			t.Errorf("debug listener GET %s: %d, want %d", path, got, want)
		}
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine"} {
		if got := getStatus(t, "http://"+m.Addr()+path); got != http.StatusNotFound {
			t.Errorf("API listener GET %s: %d, want 404", path, got)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(debug + "/debug/pprof/"); err == nil {
		t.Error("the debug listener still answers after Close")
	}
}

// getStatus returns the status of GET url.
func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func TestMainNonLoopbackWarning(t *testing.T) {
	_, logs := openDevMain(t, func(c *Config) { c.Listen = "0.0.0.0:0" })
	if !strings.Contains(logs.String(), "anyone who can reach this port can take and release locks") {
		t.Fatalf("no warning in:\n%s", logs)
	}
}

func TestMainConsoleLog(t *testing.T) {
	_, logs := openDevMain(t, func(c *Config) { c.LogFormat = "console" })
	if s := logs.String(); !strings.Contains(s, "listening") || strings.HasPrefix(s, "{") {
		t.Fatalf("console log:\n%s", s)
	}
}

func TestMainTLS(t *testing.T) {
	certFile, keyFile, pool := selfSignedCert(t)
	m, logs := openDevMain(t, func(c *Config) { c.TLSCert, c.TLSKey = certFile, keyFile })
	if l := logs.find(t, "listening"); l == nil || l["tls"] != true {
		t.Fatalf("listening line %v", l)
	}
	cancel, wait := runMain(t, m)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, body := post(t, c, "https://"+m.Addr()+"/locks/tls", "")
	if resp.StatusCode != http.StatusCreated || resp.TLS == nil {
		t.Fatalf("POST over TLS: %d %v", resp.StatusCode, body)
	}
	// Plain HTTP is refused.
	if resp, err := http.Get("http://" + m.Addr() + "/readyz"); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS port: %d", resp.StatusCode)
		}
	}
	cancel()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key to files.
func selfSignedCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "redlockd test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true,

		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:80": true, "[::1]:80": true, "127.1.2.3:80": true,
		"0.0.0.0:80": false, "[::]:80": false, "10.0.0.1:80": false,
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := isLoopback(a); got != want {
			t.Errorf("%s: got %v, want %v", addr, got, want)
		}
	}
}

// TestLogLineTime checks that newLogger's lines carry their time as
// zerolog's Timestamp would, in the same place, in UTC with milliseconds
// (docs/operations.md, logs).
func TestLogLineTime(t *testing.T) {
	const layout = "2006-01-02T15:04:05.000Z07:00"
	var ours, theirs bytes.Buffer
	before := time.Now().Truncate(time.Millisecond)
	l := newLogger(&ours, Config{LogLevel: "info"})
	l.Info().Str("req_id", "r1").Int("status", 201).Msg("request")
	after := time.Now()
	z := zerolog.New(&theirs).With().Timestamp().Logger()
	z.Info().Str("req_id", "r1").Int("status", 201).Msg("request")

	var line struct{ Time string }
	if err := json.Unmarshal(ours.Bytes(), &line); err != nil {
		t.Fatalf("%q: %v", ours.String(), err)
	}
	at, err := time.Parse(layout, line.Time)
	if err != nil || at.UTC().Format(layout) != line.Time {
		t.Fatalf("time %q is not in %s, UTC (%v)", line.Time, layout, err)
	}
	if at.Before(before) || at.After(after) {
		t.Errorf("time %v not within [%v, %v]", at, before, after)
	}
	timeRe := regexp.MustCompile(`"time":"[^"]*"`)
	if o, z := timeRe.ReplaceAllString(ours.String(), `"time":T`), timeRe.ReplaceAllString(theirs.String(), `"time":T`); o != z {
		t.Errorf("line\n%s\nwant, but for the time,\n%s", ours.String(), theirs.String())
	}
}
