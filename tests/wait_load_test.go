package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/internal/load"
	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/server"
)

// inProcGateway is a gateway (coordinator + HTTP server on a loopback port)
// inside the test process, so a measurement can read the coordinator's
// counters.
type inProcGateway struct {
	URL   string
	Coord *redlock.Coordinator
}

func startInProcGateway(t *testing.T, nodes []*RedisNode) *inProcGateway {
	t.Helper()
	var opts []*redis.Options
	for _, n := range nodes {
		opts = append(opts, &redis.Options{Addr: n.Addr})
	}
	coord, err := redlock.New(opts, redlock.Options{NoQuarantine: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: server.New(server.Config{Locker: coord, Log: zerolog.New(io.Discard)}).Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		coord.Close()
	})
	return &inProcGateway{URL: "http://" + ln.Addr().String(), Coord: coord}
}

// TestWaitLoad measures hand-off between 16 clients contending for one
// resource (hold ~1ms, then ask again at once): waiting in the gateway's
// queue, on one gateway and on two replicas, next to a plain client-side
// 50–250ms random-retry polling loop, in the same run. In CI a 500ms smoke
// run per mode; the measurement runs 10s per mode:
//
//	REDLOCKD_LOAD=1 go test ./tests -run TestWaitLoad -v -timeout 10m
func TestWaitLoad(t *testing.T) {
	d := loadDuration(t, 500*time.Millisecond)
	nodes := startCluster(t, 5)
	g1 := startInProcGateway(t, nodes)
	g2 := startInProcGateway(t, nodes)
	ctx := t.Context()
	type run struct {
		r     load.ContendResult
		stats redlock.Stats
	}
	var runs []run
	measure := func(name string, urls []string, mode load.Mode) {
		s1, s2 := g1.Coord.Stats(), g2.Coord.Stats()
		r := load.Contend(ctx, name, urls, "contended-"+strconv.Itoa(len(runs)), 16, time.Millisecond, d, mode)
		e1, e2 := g1.Coord.Stats(), g2.Coord.Stats()
		runs = append(runs, run{r, redlock.Stats{
			Attempts:   e1.Attempts - s1.Attempts + e2.Attempts - s2.Attempts,
			SplitVotes: e1.SplitVotes - s1.SplitVotes + e2.SplitVotes - s2.SplitVotes,
		}})
	}
	measure("wait_ms, one gateway", []string{g1.URL}, load.Wait)
	measure("wait_ms, two gateways", []string{g1.URL, g2.URL}, load.Wait)
	measure("client polling 50-250ms, one gw", []string{g1.URL}, load.Poll)
	var rs []load.ContendResult
	for _, r := range runs {
		rs = append(rs, r.r)
	}
	i := 0
	t.Logf("16 clients, one resource, hold 1ms, %v per run, 5 redis-server nodes; hand-off = release response -> next 201; same = won by the client that just released; split = rounds that won some nodes but no quorum:\n%s",
		d, load.ContendTable(rs, func(load.ContendResult) string {
			s := runs[i].stats
			i++
			return fmt.Sprintf("rounds %d, split %d (%.2f%%)", s.Attempts, s.SplitVotes, 100*float64(s.SplitVotes)/float64(max(1, s.Attempts)))
		}))
	for _, r := range rs {
		if r.Acquired == 0 {
			t.Errorf("%s: no acquisition", r.Name)
		}
	}
}

// fullLoad reports whether REDLOCKD_LOAD asks for the full measurement;
// otherwise the load tests are short smoke runs of the same code.
func fullLoad() bool { return os.Getenv("REDLOCKD_LOAD") != "" }

// loadDuration is REDLOCKD_LOAD_DURATION, else 10s for a full measurement
// and smoke for a smoke run.
func loadDuration(t *testing.T, smoke time.Duration) time.Duration {
	t.Helper()
	d := smoke
	if fullLoad() {
		d = 10 * time.Second
	}
	if s := os.Getenv("REDLOCKD_LOAD_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// TestManyWaiters holds 100 locks and sends 10,000 waiting acquires to one
// gateway process (100 per lock; 1,000 of them with a 2s wait), then
// measures the gateway's RSS and the Redis commands/s while no lock changes
// hands, releases the 100 locks and checks every waiter was served (and
// released at once) or timed out with 409 after its wait. In CI it is a
// smoke run of 400 waiters on 20 locks.
//
//	REDLOCKD_LOAD=1 go test ./tests -run TestManyWaiters -v -timeout 10m
func TestManyWaiters(t *testing.T) {
	// The measurement: 10,000 waiters on 100 locks; in CI a smoke run of
	// 400 on 20.
	resources, waiters, window := 20, 400, 2*time.Second
	if fullLoad() {
		resources, waiters, window = 100, 10000, 30*time.Second // longer than the mean fallback poll
	}
	short := waiters / 10 // waiters with a 2s wait, which must time out
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes, "--max-wait", "120s")
	hc := load.NewHTTPClient(waiters)
	tr := hc.Transport.(*http.Transport)
	tr.MaxConnsPerHost = 0
	hc.Timeout = 0
	holders := make([]string, resources)
	for i := range resources {
		holders[i] = lock(t, gw, fmt.Sprintf("many-%d", i), `{"ttl_ms":60000}`).str(t, "token")
	}
	var wrote, served, timedOut, unavailable, other, lateTimeout atomic.Int64
	var wg sync.WaitGroup
	ctx := t.Context()
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := fmt.Sprintf("many-%d", i%resources)
			wait := 100000
			if i < short {
				wait = 2000
			}
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Add(1) }}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost,
				gw.URL+"/locks/"+res, strings.NewReader(fmt.Sprintf(`{"ttl_ms":10000,"wait_ms":%d}`, wait)))
			start := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				other.Add(1)
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			var body struct {
				Token string `json:"token"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusCreated && err == nil:
				served.Add(1)
				r := release(t, gw, res, body.Token)
				if r.Status != http.StatusNoContent {
					t.Errorf("waiter %d release: %v", i, r)
				}
			case (resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusServiceUnavailable) && i < short:
				// 409, or 503 when the last round before the wait ran out
				// found nodes too slow (the box is saturated while 10,000
				// requests arrive): both say "not acquired".
				if resp.StatusCode == http.StatusServiceUnavailable {
					unavailable.Add(1)
				}
				timedOut.Add(1)
				if time.Since(start) < 2*time.Second {
					lateTimeout.Add(1)
				}
			default:
				other.Add(1)
				t.Errorf("waiter %d (wait %dms): status %d", i, wait, resp.StatusCode)
			}
		}()
		if i%500 == 499 {
			// Ramp up: keep the listen backlog from overflowing.
			eventually(t, 30*time.Second, "requests written", func() bool { return wrote.Load() == int64(i+1) })
		}
	}
	eventually(t, 60*time.Second, "all waiting requests written", func() bool { return wrote.Load() == int64(waiters) })
	time.Sleep(3 * time.Second) // let the short waits run out and the gateway settle
	pid := gw.cmd.Process.Pid
	c0 := totalCommands(t, nodes)
	time.Sleep(window) // the measurement window: no lock changes hands
	c1 := totalCommands(t, nodes)
	if os.Getenv("REDLOCKD_LOAD_LOG") != "" {
		for _, n := range nodes[:1] {
			info, _ := n.Client().Info(context.Background(), "commandstats").Result()
			t.Logf("node 0 commandstats:\n%s", info)
		}
	}
	rss, hwm := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
	cmdsPerSec := float64(c1-c0-int64(len(nodes))) / window.Seconds() // minus our own INFO
	for i, tok := range holders {
		wantStatus(t, release(t, gw, fmt.Sprintf("many-%d", i), tok), http.StatusNoContent)
	}
	wg.Wait()
	if f := os.Getenv("REDLOCKD_LOAD_LOG"); f != "" {
		_ = os.WriteFile(f, []byte(gw.Stderr()), 0o644)
	}
	t.Logf("%d waiters on %d locks, one gateway process: RSS %s (peak %s); Redis commands/s over %v with no hand-off: %.1f total across %d nodes; served %d, timed out %d (of %d with a 2s wait; %d of them 503, %d early), other %d",
		waiters, resources, rss, hwm, window, cmdsPerSec, len(nodes), served.Load(), timedOut.Load(), short, unavailable.Load(), lateTimeout.Load(), other.Load())
	if served.Load() != int64(waiters-short) || timedOut.Load() != int64(short) || lateTimeout.Load() != 0 {
		t.Errorf("served %d (want %d), timed out %d (want %d), early %d", served.Load(), waiters-short, timedOut.Load(), short, lateTimeout.Load())
	}
}

// totalCommands sums total_commands_processed over the nodes.
func totalCommands(t *testing.T, nodes []*RedisNode) int64 {
	t.Helper()
	var sum int64
	for _, n := range nodes {
		info, err := n.Client().Info(context.Background(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				sum += c
			}
		}
	}
	return sum
}

// procStatus reads a field of /proc/<pid>/status, e.g. "VmRSS".
func procStatus(t *testing.T, pid int, field string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
