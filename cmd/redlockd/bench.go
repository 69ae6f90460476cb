package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/load"
	"github.com/redlockd/redlockd/redlock"
)

// benchConfig is the configuration of `redlockd bench`.
type benchConfig struct {
	URL         string
	Redis       []string
	Concurrency []int
	Duration    time.Duration
	Contended   bool
	AllowRemote bool
	ClientProcs int // GOMAXPROCS while driving the gateway over HTTP
}

const benchUsage = `Usage: redlockd bench --url URL --redis URLS [flags]

Measures acquire+release cycles against a running gateway over HTTP and, in
the same run, against the same Redis nodes with the in-process redlock
library, both naive (one goroutine and round trip per node and command) and
with per-node batching. Prints cycles/s, latency percentiles and the ratio of
each mode to the naive library at the same concurrency. It stops by itself
after --duration per mode and concurrency.

Uncontended (default): each worker locks its own resource. --contended: all
workers take turns on one resource, asking with a wait.

It refuses targets that are not on loopback unless --allow-remote is given.

Flags:
`

// parseBench parses the flags of `redlockd bench`.
func parseBench(args []string, stderr io.Writer) (*benchConfig, error) {
	c := &benchConfig{}
	fs := flag.NewFlagSet("redlockd bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchUsage)
		fs.PrintDefaults()
	}
	redisURLs := fs.String("redis", "", "comma-separated `URLs` of the gateway's Redis nodes, for the in-process library modes (empty: gateway only)")
	conc := fs.String("c", "1,16,64", "comma-separated worker `counts`")
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "the gateway's base `URL`")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long each mode runs at each concurrency")
	fs.BoolVar(&c.Contended, "contended", false, "all workers contend for one resource (with wait_ms)")
	fs.BoolVar(&c.AllowRemote, "allow-remote", false, "allow targets that are not on loopback")
	fs.IntVar(&c.ClientProcs, "client-procs", 1, "GOMAXPROCS of this process while it drives the gateway over HTTP (the library modes use them all)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, f := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("-c: %q is not a worker count in [1, 4096]", f)
		}
		c.Concurrency = append(c.Concurrency, n)
	}
	if c.ClientProcs < 1 || c.ClientProcs > 1024 {
		return nil, fmt.Errorf("--client-procs %d must be in [1, 1024]", c.ClientProcs)
	}
	if c.Duration <= 0 || c.Duration > time.Hour {
		return nil, fmt.Errorf("--duration %v must be in (0, 1h]", c.Duration)
	}
	hosts := []string{}
	u, err := url.Parse(c.URL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("--url %q: need http://host:port", c.URL)
	}
	hosts = append(hosts, u.Hostname())
	if *redisURLs != "" {
		for _, s := range strings.Split(*redisURLs, ",") {
			o, err := redis.ParseURL(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("--redis: a URL does not parse (redis://host:port)")
			}
			host, _, _ := net.SplitHostPort(o.Addr)
			hosts = append(hosts, host)
			c.Redis = append(c.Redis, strings.TrimSpace(s))
		}
	}
	if !c.AllowRemote {
		for _, h := range hosts {
			if !isLoopbackHost(h) {
				return nil, fmt.Errorf("%s is not a loopback address: a load test sends heavy traffic; give --allow-remote if you mean it", h)
			}
		}
	}
	return c, nil
}

// isLoopbackHost reports whether host is localhost or a loopback IP.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// runBench is `redlockd bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseBench(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return usage(stderr, err)
	}
	results, err := bench(ctx, c, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "redlockd bench:", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "acquire+release cycles, %v per run (%s); ratio = cycles/s against the first mode at the same C\n",
		c.Duration, map[bool]string{false: "uncontended: a resource per worker", true: "contended: one resource, with wait"}[c.Contended])
	fmt.Fprint(stdout, load.Table(results))
	return exitOK
}

// bench runs every mode at every concurrency.
func bench(ctx context.Context, c *benchConfig, progress io.Writer) ([]load.Result, error) {
	type mode struct {
		name  string
		procs int // GOMAXPROCS for the run; 0: leave it
		cycle func(workers int) (load.Cycle, func(), error)
	}
	prefix := fmt.Sprintf("bench-%d-", time.Now().UnixNano()%1e6)
	wait := time.Duration(0)
	if c.Contended {
		wait = 10 * time.Second
	}
	// Each mode and concurrency has its own resources, so that a lock a
	// run's last cycle left behind (a request cut off at the end of the run
	// may still be granted) cannot hold up the next run.
	resource := func(mode string, w int) string {
		if c.Contended {
			return prefix + mode + "-contended"
		}
		return prefix + mode + "-" + strconv.Itoa(w)
	}
	var modes []mode
	for _, naive := range []bool{true, false} {
		if len(c.Redis) == 0 {
			break
		}
		name := "library, batching"
		if naive {
			name = "library, naive"
		}
		modes = append(modes, mode{name, 0, func(workers int) (load.Cycle, func(), error) {
			var nodes []*redis.Options
			for _, u := range c.Redis {
				o, err := redis.ParseURL(u)
				if err != nil {
					return nil, nil, err
				}
				nodes = append(nodes, o)
			}
			lib, err := redlock.New(nodes, redlock.Options{NoQuarantine: true, NoBatching: naive, MaxWait: 10 * time.Second})
			if err != nil {
				return nil, nil, err
			}
			mode := fmt.Sprintf("%s-c%d", map[bool]string{true: "naive", false: "batching"}[naive], workers)
			return func(ctx context.Context, w int) error {
				l, err := lib.Acquire(ctx, resource(mode, w), redlock.AcquireOptions{TTL: 10 * time.Second, Wait: wait})
				if err != nil {
					return err
				}
				// Release even when the run ends meanwhile.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				return lib.Release(rctx, "", resource(mode, w), l.Token)
			}, func() { lib.Close() }, nil
		}})
	}
	modes = append(modes, mode{"gateway over HTTP", c.ClientProcs, func(workers int) (load.Cycle, func(), error) {
		cycle, err := load.RawHTTPCycle(c.URL, fmt.Sprintf("%shttp-c%d-", prefix, workers), workers, wait, c.Contended)
		return cycle, func() {}, err
	}})
	var results []load.Result
	for _, n := range c.Concurrency {
		for _, m := range modes {
			cycle, done, err := m.cycle(n)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(progress, "running %s at C=%d for %v\n", m.name, n, c.Duration)
			results = append(results, load.RunOnProcs(ctx, m.name, n, c.Duration, m.procs, cycle))
			done()
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
		}
	}
	return results, nil
}
