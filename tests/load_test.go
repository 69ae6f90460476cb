package tests

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/load"
	"github.com/redlockd/redlockd/redlock"
)

// TestLoad measures acquire+release cycles against 5 local redis-servers:
// through the gateway over HTTP and through the in-process redlock library,
// in the same run, at C = 1, 16 and 64 (REDLOCKD_LOAD_C, comma-separated),
// for REDLOCKD_LOAD_DURATION each (10s). It reports; it asserts only that
// cycles completed. Run it with:
//
//	REDLOCKD_LOAD=1 go test ./tests -run TestLoad -v -timeout 10m
func TestLoad(t *testing.T) {
	if os.Getenv("REDLOCKD_LOAD") == "" {
		t.Skip("set REDLOCKD_LOAD=1 to run the load measurement")
	}
	d := 10 * time.Second
	if s := os.Getenv("REDLOCKD_LOAD_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	cs := []int{1, 16, 64}
	if s := os.Getenv("REDLOCKD_LOAD_C"); s != "" {
		cs = nil
		for _, f := range strings.Split(s, ",") {
			var c int
			for _, r := range f {
				c = c*10 + int(r-'0')
			}
			cs = append(cs, c)
		}
	}
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes) // default: one access log line per request

	var opts []*redis.Options
	for _, n := range nodes {
		opts = append(opts, &redis.Options{Addr: n.Addr})
	}
	libCycle := func(noBatching bool) load.Cycle {
		lib, err := redlock.New(opts, redlock.Options{NoQuarantine: true, NoBatching: noBatching})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lib.Close() })
		return func(ctx context.Context, w int) error {
			res := fmt.Sprintf("lib-%t-%d", noBatching, w)
			l, err := lib.Acquire(ctx, res, redlock.AcquireOptions{TTL: 10 * time.Second})
			if err != nil {
				return err
			}
			return lib.Release(ctx, "", res, l.Token)
		}
	}
	naive, batched := libCycle(true), libCycle(false)
	var results []load.Result
	ctx := t.Context()
	for _, c := range cs {
		client := load.NewHTTPClient(c)
		results = append(results,
			load.Run(ctx, "library naive (no batching)", c, d, naive),
			load.Run(ctx, "library with batching", c, d, batched),
			load.Run(ctx, "gateway over HTTP", c, d, rawCycle(t, gw.URL, c)),
		)
		client.CloseIdleConnections()
	}
	t.Logf("acquire+release cycles, 5 redis-server nodes, %v per run, ratio = cycles/s against the naive library at the same C:\n%s", d, load.Table(results))
	t.Logf("gateway process: RSS %s, peak %s", procStatus(t, gw.cmd.Process.Pid, "VmRSS"), procStatus(t, gw.cmd.Process.Pid, "VmHWM"))
	for _, r := range results {
		if r.Cycles == 0 || r.Errors > r.Cycles/100 {
			t.Errorf("%s C=%d: %d cycles, %d errors", r.Name, r.C, r.Cycles, r.Errors)
		}
	}
}

func rawCycle(t *testing.T, url string, c int) load.Cycle {
	t.Helper()
	cycle, err := load.RawHTTPCycle(url, "http-", c, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	return cycle
}
