package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// shortWait is the wait_ms of the waiters that must time out.
const shortWait = time.Second

// waiting is what the waiters run measured.
type waiting struct {
	waiters, short int
	// served got the lock (and released it at once); timedOut got 409, or
	// 503 when the last round found the nodes too slow, after their wait:
	// both say "not acquired"; early timed out before their wait.
	served, timedOut, early, other int
	lastErr                        string
	rssKB, hwmKB                   int64 // the gateway's VmRSS and VmHWM while they wait
	idleCommands                   float64
}

// waitMany sends n waiting acquires of one lock that a holder keeps (a tenth
// of them with a wait of shortWait, the others long enough to be served in
// turn), reads the gateway's memory and the nodes' commands per second over
// idle while they wait, then releases the lock and waits until every waiter
// was served or timed out.
func waitMany(ctx context.Context, l *lab, resource string, n int, idle time.Duration) (*waiting, error) {
	r := &waiting{waiters: n, short: n / 10}
	hc := newHTTPClient(n)
	defer hc.CloseIdleConnections()
	u := l.url + "/locks/" + resource
	status, holder, err := send(ctx, hc, http.MethodPost, u, `{"ttl_ms":600000}`, "")
	if err != nil || status != http.StatusCreated {
		return nil, fmt.Errorf("waiters: the holder's acquire: status %d, %v", status, err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var sent, shortDone atomic.Int64
	for i := range n {
		wg.Go(func() {
			var once sync.Once
			wrote := func() { once.Do(func() { sent.Add(1) }) }
			defer wrote() // also when the request failed before it was written
			wait := 10 * time.Minute
			if i < r.short {
				wait = shortWait
				defer shortDone.Add(1)
			}
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote() }}
			start := time.Now()
			status, _, _, err := lockCycle(httptrace.WithClientTrace(ctx, trace), hc, u,
				fmt.Sprintf(`{"ttl_ms":10000,"wait_ms":%d}`, wait.Milliseconds()), 0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && i >= r.short:
				r.served++
			case (status == http.StatusConflict || status == http.StatusServiceUnavailable) && i < r.short:
				r.timedOut++
				if time.Since(start) < shortWait {
					r.early++
				}
			default:
				r.other++
				r.lastErr = fmt.Sprintf("waiter %d (wait %v): status %d, %v", i, wait, status, err)
			}
		})
		if i%500 == 499 { // in steps, so that the listen backlog does not overflow
			if err := await(ctx, func() bool { return sent.Load() == int64(i+1) }); err != nil {
				return nil, err
			}
		}
	}
	if err := await(ctx, func() bool { return sent.Load() == int64(n) && shortDone.Load() == int64(r.short) }); err != nil {
		return nil, err
	}
	if r.idleCommands, err = idleCommands(ctx, l.nodes, idle); err != nil {
		return nil, err
	}
	r.rssKB, r.hwmKB = procStatusKB(l.pid, "VmRSS"), procStatusKB(l.pid, "VmHWM")
	if status, _, err := send(ctx, hc, http.MethodDelete, u, "", holder); err != nil || status != http.StatusNoContent {
		return nil, fmt.Errorf("waiters: the holder's release: status %d, %v", status, err)
	}
	wg.Wait()
	return r, nil
}

// await polls cond, a state of another process that announces nothing,
// until it holds. It gives up after a minute.
func await(ctx context.Context, cond func() bool) error {
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("waiters: the requests were not sent, or the short waits did not end, within a minute")
		}
	}
	return nil
}

var commandsRE = regexp.MustCompile(`total_commands_processed:(\d+)`)

// idleCommands returns the commands per second that the nodes processed
// over d, less the tool's own INFO.
func idleCommands(ctx context.Context, nodes []string, d time.Duration) (float64, error) {
	var total [2]int64
	for i := range total {
		time.Sleep(time.Duration(i) * d) // the window, between the two counts
		for _, o := range options(nodes, 0) {
			rc := redis.NewClient(o)
			info, err := rc.Info(ctx, "stats").Result()
			rc.Close()
			m := commandsRE.FindStringSubmatch(info)
			if err != nil || m == nil {
				return 0, fmt.Errorf("INFO stats of %s: %v", o.Addr, err)
			}
			n, _ := strconv.ParseInt(m[1], 10, 64)
			total[i] += n
		}
	}
	return float64(total[1]-total[0]-int64(len(nodes))) / d.Seconds(), nil
}

// procStatusKB reads a "<n> kB" field of /proc/<pid>/status, 0 if absent.
func procStatusKB(pid int, field string) (n int64) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if m := regexp.MustCompile(`(?m)^` + field + `:\s*(\d+) kB`).FindSubmatch(b); m != nil {
		n, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	return n
}
