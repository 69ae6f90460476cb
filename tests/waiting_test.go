package tests

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestManyWaiters: a waiting acquire is served only once the holder
// releases, in turn, or times out with 409 (or 503, when the last round
// before the end of the wait found the nodes too slow: both say "not
// acquired"), not before its wait (docs/safety.md "Guarantees and limits,
// in plain words", Waiting; openapi.yaml POST /locks/{resource}): 400
// waiting acquires on 20 held locks, 40 of them with a 2s wait. The
// measurement of memory and idle Redis commands with 10,000 waiters is in
// bench/ (docs/measuring.md "The floors").
func TestManyWaiters(t *testing.T) {
	t.Parallel()
	const resources, waiters, short = 20, 400, 40
	gw := startGateway(t, startCluster(t, 5))
	holders := make([]string, resources)
	for i := range resources {
		holders[i] = lock(t, gw, fmt.Sprintf("many-%d", i), `{"ttl_ms":60000}`).str(t, "token")
	}
	var served, timedOut atomic.Int64
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			res, wait := fmt.Sprintf("many-%d", i%resources), 20000
			if i < short {
				wait = 2000
			}
			start := time.Now()
			r, err := gw.try(http.MethodPost, "/locks/"+res, fmt.Sprintf(`{"ttl_ms":10000,"wait_ms":%d}`, wait))
			switch {
			case err != nil:
				t.Errorf("waiter %d: %v", i, err)
			case r.Status == http.StatusCreated && i >= short:
				served.Add(1)
				tok, _ := r.JSON["token"].(string)
				if r, err := gw.try(http.MethodDelete, "/locks/"+res, "", "Lock-Token", tok); err != nil || r.Status != http.StatusNoContent {
					t.Errorf("waiter %d release: %v, %v", i, r, err)
				}
			case (r.Status == http.StatusConflict || r.Status == http.StatusServiceUnavailable) && i < short:
				timedOut.Add(1)
				if took := time.Since(start); took < 2*time.Second {
					t.Errorf("waiter %d timed out after %v, before its 2s wait", i, took)
				}
			default:
				t.Errorf("waiter %d (wait %dms): %v", i, wait, r)
			}
		})
	}
	eventually(t, 30*time.Second, "the short waits' end", func() bool { return timedOut.Load() == short })
	if n := served.Load(); n != 0 {
		t.Fatalf("%d waiters served while the holders hold their locks", n)
	}
	for i, tok := range holders {
		wantStatus(t, release(t, gw, fmt.Sprintf("many-%d", i), tok), http.StatusNoContent)
	}
	wg.Wait()
	if served.Load() != waiters-short || timedOut.Load() != short {
		t.Errorf("served %d (want %d), timed out %d (want %d)", served.Load(), waiters-short, timedOut.Load(), short)
	}
}

// TestContendedWaiters: clients that take turns on one lock with wait_ms
// are all served, no two holds overlap (each 201 comes after the previous
// holder sent its release), and the fencing tokens grow in the order of
// the holds (docs/safety.md "Guarantees and limits, in plain words",
// Waiting and Fencing tokens): 16 clients, each holding it 1ms and asking
// again. The hand-off latency and fairness are measured in bench/.
func TestContendedWaiters(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, startCluster(t, 5))
	type hold struct {
		acquired, releasing time.Time
		fence               int64
	}
	var mu sync.Mutex
	var holds []hold
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for range 3 {
				r, err := gw.try(http.MethodPost, "/locks/contended", `{"ttl_ms":10000,"wait_ms":10000}`)
				if err != nil || r.Status != http.StatusCreated {
					t.Errorf("client %d: %v, %v", i, r, err)
					return
				}
				h := hold{acquired: time.Now()}
				h.fence, _ = strconv.ParseInt(fmt.Sprint(r.JSON["fencing_token"]), 10, 64)
				time.Sleep(time.Millisecond) // the critical section
				h.releasing = time.Now()
				tok, _ := r.JSON["token"].(string)
				if r, err := gw.try(http.MethodDelete, "/locks/contended", "", "Lock-Token", tok); err != nil || r.Status != http.StatusNoContent {
					t.Errorf("client %d release: %v, %v", i, r, err)
					return
				}
				mu.Lock()
				holds = append(holds, h)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(holds) != 48 {
		t.Fatalf("%d acquisitions, want 48", len(holds))
	}
	slices.SortFunc(holds, func(a, b hold) int { return a.acquired.Compare(b.acquired) })
	for i := 1; i < len(holds); i++ {
		if p, h := holds[i-1], holds[i]; !h.acquired.After(p.releasing) || h.fence <= p.fence {
			t.Fatalf("hold %d (fence %d, from %v) overlaps or follows hold %d (fence %d, releasing at %v)",
				i, h.fence, h.acquired, i-1, p.fence, p.releasing)
		}
	}
}

// TestRetryAfterAfterWait: the 409 lock-held of an acquire that waited in
// vain tells the holder's remaining TTL at its end (plus jitter), not the
// TTL seen when the wait began, for a lock and for a semaphore's permit
// (docs/design.md "Decisions on requests and answers"; openapi.yaml
// "Behaviour where the specification is silent").
func TestRetryAfterAfterWait(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes)
	const ttl, wait = 10000, 2500
	for _, path := range []string{"/locks/" + resourceName(t), "/semaphores/" + resourceName(t)} {
		limit := ""
		if strings.HasPrefix(path, "/semaphores/") {
			limit = `"limit":1,`
		}
		wantStatus(t, gw.do(t, http.MethodPost, path, fmt.Sprintf(`{%s"ttl_ms":%d}`, limit, ttl)), http.StatusCreated)
		r := gw.do(t, http.MethodPost, path, fmt.Sprintf(`{%s"wait_ms":%d}`, limit, wait))
		wantProblem(t, r, http.StatusConflict, "lock-held")
		// At most the remaining TTL plus 10% and 100 ms of jitter.
		if got, most := r.num(t, "retry_after_ms"), int64((ttl-wait)*11/10+100); got > most {
			t.Errorf("%s after a %d ms wait: retry_after_ms %d, want at most %d", path, wait, got, most)
		}
		if got := retryAfter(t, r); got > (ttl-wait)*11/10/1000+1 {
			t.Errorf("%s after a %d ms wait: Retry-After %d", path, wait, got)
		}
	}
}
