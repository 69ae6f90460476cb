package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMaxWaitersPerNamespace: with API keys, a namespace gets at most its
// share of --max-waiters (a quarter by default): with --max-waiters 4, key A
// asking for every waiting slot gets one and its other waiting acquires get
// 503 too-many-waiters at once, saying that the namespace's limit was hit;
// key B of another namespace still gets a slot; a waiting acquire of a free
// lock needs no slot; the waiters gauge follows and comes back to 0
// (docs/configuration.md "Configuration": --max-waiters-per-namespace;
// docs/operations.md "Scaling the gateway horizontally": waiters).
func TestMaxWaitersPerNamespace(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b := keygen(t, "svc-a", "team-a"), keygen(t, "svc-b", "team-b")
	gw := startGateway(t, nodes, "--api-keys-file", keysFile(t, a, b), "--max-waiters", "4", "--max-wait", "20s")
	res := resourceName(t)
	post := func(key, body string) (*Resp, error) {
		return gw.try(http.MethodPost, "/locks/"+res, body, bearer(key)...)
	}
	hold := func(key string) string {
		t.Helper()
		r := gw.do(t, http.MethodPost, "/locks/"+res, `{"ttl_ms":30000}`, bearer(key)...)
		wantStatus(t, r, http.StatusCreated)
		return r.str(t, "token")
	}
	waiters := func() float64 { return scrapeMetrics(t, gw).value("redlockd_waiters") }
	type result struct {
		r   *Resp
		err error
	}
	wait := func(key string, out chan<- result) {
		go func() {
			r, err := post(key, `{"wait_ms":15000}`)
			out <- result{r, err}
		}()
	}
	next := func(c <-chan result, who string) *Resp {
		t.Helper()
		select {
		case w := <-c:
			if w.err != nil {
				t.Fatalf("%s: %v", who, w.err)
			}
			return w.r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer within 10s", who)
			return nil
		}
	}

	// A holds its lock and asks for every waiting slot.
	tokA := hold(a.Key)
	fromA := make(chan result, 4)
	for range 4 {
		wait(a.Key, fromA)
	}
	for range 3 {
		r := next(fromA, "a waiter of A beyond its share")
		wantProblem(t, r, http.StatusServiceUnavailable, "too-many-waiters")
		if d := r.str(t, "detail"); !strings.Contains(d, "namespace") {
			t.Errorf("detail %q does not say the namespace's limit was hit", d)
		}
		wantNoSecret(t, r, a.Key)
	}
	eventually(t, 10*time.Second, "1 waiter", func() bool { return waiters() == 1 })

	// B still gets a slot, and needs none for a free lock.
	r := gw.do(t, http.MethodPost, "/locks/"+resourceName(t)+"-free", `{"wait_ms":15000}`, bearer(b.Key)...)
	wantStatus(t, r, http.StatusCreated)
	wantStatus(t, gw.do(t, http.MethodDelete, r.Path, "", append(bearer(b.Key), "Lock-Token", r.str(t, "token"))...), http.StatusNoContent)
	tokB := hold(b.Key) // the same name in B's namespace: another lock
	fromB := make(chan result, 1)
	wait(b.Key, fromB)
	eventually(t, 10*time.Second, "2 waiters", func() bool { return waiters() == 2 })

	// Each waiter gets its lock once the holder releases it.
	for _, c := range []struct {
		key, tok, who string
		waiter        chan result
	}{{a.Key, tokA, "A's waiter", fromA}, {b.Key, tokB, "B's waiter", fromB}} {
		wantStatus(t, gw.do(t, http.MethodDelete, "/locks/"+res, "", append(bearer(c.key), "Lock-Token", c.tok)...), http.StatusNoContent)
		w := next(c.waiter, c.who)
		wantStatus(t, w, http.StatusCreated)
		wantStatus(t, gw.do(t, http.MethodDelete, "/locks/"+res, "", append(bearer(c.key), "Lock-Token", w.str(t, "token"))...), http.StatusNoContent)
	}
	eventually(t, 10*time.Second, "0 waiters", func() bool { return waiters() == 0 })
}
