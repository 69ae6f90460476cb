package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlockd/redlockd/client"
)

// leakKinds is one lock of every kind: where to acquire it, with what body,
// the body of a waiter it keeps out (wait_ms to fill in; a writer behind a
// reader), and where to release it.
var leakKinds = []struct{ acquire, body, wait, release string }{
	{"/locks/leak-w", `{}`, `{"wait_ms":%d}`, "/locks/leak-w"},
	{"/locks/leak-r", `{"mode":"read"}`, `{"wait_ms":%d}`, "/locks/leak-r"},
	{"/locks", `{"resources":["leak-m1","leak-m2"]}`, `{"wait_ms":%d,"resources":["leak-m1","leak-m2"]}`, "/locks?resource=leak-m1&resource=leak-m2"},
	{"/semaphores/leak-s", `{"limit":1}`, `{"wait_ms":%d,"limit":1}`, "/semaphores/leak-s"},
}

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

// TestQALeaksEveryKind: acquire/release cycles of every kind, and waits that
// time out, that the client cancels and that are woken, leave the gateway's
// goroutines and open files where a first round left them (SPEC §6: its
// connection pools filled), and Redis with no key but the fence counters
// and the health key once max TTL has passed (docs/safety.md, Keys).
func TestQALeaksEveryKind(t *testing.T) {
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes, "--max-ttl", "2s", "--default-ttl", "2s", "--max-wait", "2s")
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
	round := func() {
		for range 5 {
			for _, k := range leakKinds {
				r := ask(k.acquire, k.body, 10*time.Second, http.StatusCreated)
				wantStatus(t, gw.do(t, http.MethodDelete, k.release, "", "Lock-Token", r.str(t, "token")), http.StatusNoContent)
			}
		}
		for _, k := range leakKinds {
			holder := ask(k.acquire, k.body, 10*time.Second, http.StatusCreated).str(t, "token")
			for range 5 {
				wg.Add(2)
				go func() { defer wg.Done(); ask(k.acquire, fmt.Sprintf(k.wait, 200), 10*time.Second, http.StatusConflict) }()
				go func() { defer wg.Done(); ask(k.acquire, fmt.Sprintf(k.wait, 2000), 200*time.Millisecond, 0) }()
			}
			wg.Wait()
			woken := make(chan *Resp)
			go func() { woken <- ask(k.acquire, fmt.Sprintf(k.wait, 2000), 10*time.Second, http.StatusCreated) }()
			eventually(t, 5*time.Second, "a waiter of "+k.acquire, func() bool { return scrapeMetrics(t, gw).value("redlockd_waiters") == 1 })
			wantStatus(t, gw.do(t, http.MethodDelete, k.release, "", "Lock-Token", holder), http.StatusNoContent)
			wantStatus(t, gw.do(t, http.MethodDelete, k.release, "", "Lock-Token", (<-woken).str(t, "token")), http.StatusNoContent)
		}
	}
	round()
	g0, f0 := gatewayGauges(t, gw)
	for range 3 {
		round()
	}
	settles(t, gw, g0, f0)

	eventually(t, 10*time.Second, "every key but fences and health expired", func() bool {
		for _, line := range strings.Split(strings.TrimSpace(keySnapshot(t, nodes)), "\n") {
			if !strings.Contains(line, `"redlockd:fence:`) {
				return false
			}
		}
		return true
	})
}

// TestQACancelledWriterLetsReadersIn: a writer waiting behind a reader
// whose client leaves in the middle of one of its rounds leaves the wwait
// sets for good: the round's refusals, answered after the gateway removed
// the writer, must not put it back and keep new readers out for the rest of
// its wait.
func TestQACancelledWriterLetsReadersIn(t *testing.T) {
	gw := startGateway(t, startCluster(t, 3), "--max-wait", "10s")
	res := resourceName(t)
	lock(t, gw, res, `{"mode":"read","ttl_ms":30000}`)
	cl := &http.Client{Timeout: 150 * time.Millisecond}
	for i := range 10 {
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				req, err := newRequest(gw.URL+"/locks/"+res, http.MethodPost, `{"wait_ms":10000}`)
				if err != nil {
					t.Error(err)
					return
				}
				if r, err := sendWith(cl, req); err == nil {
					t.Errorf("a writer was answered while a reader holds the lock: %s", r)
				}
			})
		}
		wg.Wait()
		eventually(t, 5*time.Second, "the writers gone", func() bool { return scrapeMetrics(t, gw).value("redlockd_waiters") == 0 })
		eventually(t, 2*time.Second, fmt.Sprintf("round %d: a new reader let in", i), func() bool {
			r := acquire(t, gw, res, `{"mode":"read","ttl_ms":30000}`)
			return r.Status == http.StatusCreated
		})
	}
}

// TestQALeaksClientGivesUp: a Go client's Acquire that times out or is
// cancelled while the gateway waits leaves no connection open on either
// side: the goroutines of the client's process, and the gateway's
// goroutines and open files, return to their baseline.
func TestQALeaksClientGivesUp(t *testing.T) {
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
