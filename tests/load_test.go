package tests

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/load"
	"github.com/redlockd/redlockd/redlock"
)

// TestLoad measures acquire+release cycles against 5 local redis-servers:
// through the gateway over HTTP and through the in-process redlock library
// (naive and with batching), in the same run, and asserts that every mode
// completed cycles. In CI it is a short smoke run (C = 1 and 4, 300ms per
// mode); the measurement runs at C = 1, 16 and 64 (REDLOCKD_LOAD_C,
// comma-separated) for REDLOCKD_LOAD_DURATION each (10s):
//
//	REDLOCKD_LOAD=1 go test ./tests -run 'TestLoad$' -v -timeout 10m
func TestLoad(t *testing.T) {
	d := loadDuration(t, 300*time.Millisecond)
	cs := []int{1, 4}
	if fullLoad() {
		cs = []int{1, 16, 64}
	}
	if s := os.Getenv("REDLOCKD_LOAD_C"); s != "" {
		cs = nil
		for _, f := range strings.Split(s, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || c < 1 {
				t.Fatalf("REDLOCKD_LOAD_C: %q is not a worker count", f)
			}
			cs = append(cs, c)
		}
	}
	nodes := startCluster(t, 5)
	// The measurement uses the default node timeout (50ms). A smoke run
	// shares the CPU with the rest of the suite under -race: a longer one
	// keeps a slow moment from failing it.
	timeout := 50 * time.Millisecond
	if !fullLoad() {
		timeout = time.Second
	}
	gw := startGateway(t, nodes, "--node-timeout", timeout.String()) // one access log line per request

	var opts []*redis.Options
	for _, n := range nodes {
		opts = append(opts, &redis.Options{Addr: n.Addr})
	}
	libs := map[bool]*redlock.Coordinator{}
	for _, noBatching := range []bool{true, false} {
		lib, err := redlock.New(opts, redlock.Options{NoQuarantine: true, NoBatching: noBatching, NodeTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lib.Close() })
		libs[noBatching] = lib
	}
	// Each mode and concurrency locks its own resources, and releases even
	// when the run ends meanwhile, so that a cycle cut off at the end of a
	// run cannot hold up the next.
	libCycle := func(noBatching bool, c int) load.Cycle {
		lib := libs[noBatching]
		return func(ctx context.Context, w int) error {
			res := fmt.Sprintf("lib-%t-c%d-%d", noBatching, c, w)
			l, err := lib.Acquire(ctx, res, redlock.AcquireOptions{TTL: 10 * time.Second})
			if err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return lib.Release(rctx, "", res, l.Token)
		}
	}
	// The floors, each in a process of its own: the same HTTP cycles
	// against a no-op net/http server, what any Go gateway costs at the
	// least; against the gateway's own handler over an in-memory locker,
	// what its HTTP layer costs without Redis; and against a bare handler
	// over a coordinator on the same nodes, what the gateway would do if
	// its HTTP layer cost nothing beyond net/http (see floorEnv). The bare
	// floor runs with Go's defaults, without the gateway's GOMAXPROCS and
	// GOGC governor.
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	floor, stack := startFloor(t, floorNoop), startFloor(t, floorStack)
	bare := startFloor(t, floorBare, floorNodesEnv+"="+strings.Join(addrs, ","), floorTimeoutEnv+"="+timeout.String())
	var results []load.Result
	ctx := t.Context()
	for _, c := range cs {
		naive, batched := libCycle(true, c), libCycle(false, c)
		results = append(results,
			load.Run(ctx, "library naive (no batching)", c, d, naive),
			load.Run(ctx, "library with batching", c, d, batched),
			load.RunOnProcs(ctx, "gateway over HTTP", c, d, 1, rawCycle(t, gw.URL, "gw", c)),
			load.RunOnProcs(ctx, "floor: net/http, no-op handler", c, d, 1, rawCycle(t, floor, "floor", c)),
			load.RunOnProcs(ctx, "floor: gateway handler, no Redis", c, d, 1, rawCycle(t, stack, "stack", c)),
			load.RunOnProcs(ctx, "floor: bare handler, with Redis", c, d, 1, rawCycle(t, bare, "bare", c)),
		)
	}
	t.Logf("acquire+release cycles, 5 redis-server nodes, %v per run, ratio = cycles/s against the naive library at the same C:\n%s", d, load.Table(results))
	t.Logf("gateway process: RSS %s, peak %s", procStatus(t, gw.cmd.Process.Pid, "VmRSS"), procStatus(t, gw.cmd.Process.Pid, "VmHWM"))
	for _, r := range results {
		if r.Cycles == 0 || r.Errors > r.Cycles/100 {
			t.Errorf("%s C=%d: %d cycles, %d errors", r.Name, r.C, r.Cycles, r.Errors)
		}
	}
}

// rawCycle is an uncontended acquire+release cycle over HTTP on resources
// named after name and c: a lock a run leaves behind (it may end between an
// acquire and its release) is no other run's.
func rawCycle(t *testing.T, url, name string, c int) load.Cycle {
	t.Helper()
	cycle, err := load.RawHTTPCycle(url, fmt.Sprintf("http-%s-c%d-", name, c), c, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	return cycle
}
