package tests

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/redistest"
)

// gatewayGauges reads the gateway's goroutines and open files from /metrics.
func gatewayGauges(t testing.TB, g *Gateway) (goroutines, fds float64) {
	t.Helper()
	m := scrapeMetrics(t, g)
	return m.value("go_goroutines"), m.value("process_open_fds")
}

// settles waits until the gateway's goroutines and open files are back
// within a small margin of the baseline g0, f0. Open files get a wider one:
// the gateway's Redis connection pools may grow up to their bound under a
// burst, while a leak of one per request grows by tens per round.
func settles(t testing.TB, g *Gateway, g0, f0 float64) {
	t.Helper()
	var gs, fs float64
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if gs, fs = gatewayGauges(t, g); gs <= g0+3 && fs <= f0+10 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after 10s, goroutines %v (baseline %v), open files %v (baseline %v)", gs, g0, fs, f0)
		}
	}
	t.Logf("goroutines %v → %v, open files %v → %v", g0, gs, f0, fs)
}

// TestNoLeaksEveryKind: acquire/release cycles of every kind, and waits that
// time out, that the client cancels and that are woken, leave the gateway's
// goroutines and open files where a first round left them (its connection
// pools filled), and Redis with no key but the fence counters and the health
// key once max TTL has passed (docs/safety.md
// "Guarantees and limits, in plain words": Keys).
func TestNoLeaksEveryKind(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	nodes := startCluster(t, 3)
	// Short enough that every key expires within the test, long enough
	// that a holder outlives the test's own steps on a loaded machine (a
	// loaded run once took 3s between a holder's grant and its release).
	gw := startGateway(t, nodes, "--max-ttl", "10s", "--default-ttl", "10s", "--max-wait", "8s")
	var wg sync.WaitGroup
	ask := func(path, body string, timeout time.Duration, want int) *Resp {
		req, err := newRequest(gw.URL+path, http.MethodPost, body)
		if err != nil {
			t.Error(err)
			return nil
		}
		r, err := sendWith(&http.Client{Timeout: timeout}, req)
		switch {
		case want == 0 && err == nil:
			t.Errorf("%s: answered before the client gave up: %s", path, r)
		case want != 0 && err != nil:
			t.Error(err)
		case want != 0 && r.Status != want:
			t.Errorf("%s: %s, want %d", path, r, want)
		}
		return r
	}
	res := resourceName(t)
	round := func() {
		for range 5 {
			for _, k := range lockKinds {
				r := ask(k.acquireURL(res), k.body(res, ""), 10*time.Second, http.StatusCreated)
				wantStatus(t, gw.do(t, http.MethodDelete, k.url(res), "", "Lock-Token", r.str(t, "token")), http.StatusNoContent)
			}
		}
		for _, k := range lockKinds {
			w := k.keptOut() // the waiter a holder of k keeps out
			holder := ask(k.acquireURL(res), k.body(res, ""), 10*time.Second, http.StatusCreated).str(t, "token")
			for range 5 {
				wg.Add(2)
				go func() {
					defer wg.Done()
					ask(w.acquireURL(res), w.body(res, `,"wait_ms":200`), 10*time.Second, http.StatusConflict)
				}()
				go func() {
					defer wg.Done()
					ask(w.acquireURL(res), w.body(res, `,"wait_ms":8000`), 200*time.Millisecond, 0)
				}()
			}
			wg.Wait()
			woken := make(chan *Resp)
			go func() {
				woken <- ask(w.acquireURL(res), w.body(res, `,"wait_ms":8000`), 10*time.Second, http.StatusCreated)
			}()
			eventually(t, 5*time.Second, "a waiter of a "+k.name, func() bool { return scrapeMetrics(t, gw).value("redlockd_waiters") == 1 })
			wantStatus(t, gw.do(t, http.MethodDelete, k.url(res), "", "Lock-Token", holder), http.StatusNoContent)
			wantStatus(t, gw.do(t, http.MethodDelete, w.url(res), "", "Lock-Token", (<-woken).str(t, "token")), http.StatusNoContent)
		}
	}
	round()
	g0, f0 := gatewayGauges(t, gw)
	for range 3 {
		round()
	}
	settles(t, gw, g0, f0)

	eventually(t, 30*time.Second, "every key but fences and health expired", func() bool {
		for _, line := range strings.Split(strings.TrimSpace(keySnapshot(t, nodes)), "\n") {
			if !strings.Contains(line, `"redlockd:fence:`) {
				return false
			}
		}
		return true
	})
}

// TestNoLeaksClientGivesUp: a Go client's Acquire that times out or is
// cancelled while the gateway waits returns the context's error and leaves no
// connection open on either side: the goroutines of the client's process, and
// the gateway's goroutines and open files, return to their baseline
// (docs/clients.md "Go"; docs/safety.md
// "Guarantees and limits, in plain words": a waiter whose client disconnects
// leaves the queue).
func TestNoLeaksClientGivesUp(t *testing.T) {
	// Not parallel: it counts the test process's goroutines.
	gw := startGateway(t, startCluster(t, 3), "--max-wait", "10s")
	c, err := client.New(gw.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, err := c.Acquire(ctx, "leak-client", client.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g0, f0 := gatewayGauges(t, gw)
	n0 := runtime.NumGoroutine()
	for i := range 20 {
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if i%2 == 1 {
			cctx, cancel = context.WithCancel(ctx)
			time.AfterFunc(100*time.Millisecond, cancel)
		}
		_, err := c.Acquire(cctx, "leak-client", client.AcquireOptions{Wait: 10 * time.Second})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Fatalf("acquire %d: %v, want the context's error", i, err)
		}
	}
	settles(t, gw, g0, f0)
	eventually(t, 5*time.Second, "the client's goroutines back to their baseline", func() bool { return runtime.NumGoroutine() <= n0+2 })
	if err := c.Release(ctx, "leak-client", held.Token); err != nil {
		t.Fatal(err)
	}
}
