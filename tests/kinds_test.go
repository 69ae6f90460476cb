package tests

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockKind is one of the four lock-like things (openapi.yaml: a lock, a
// read lock, the locks of several resources, a semaphore's permit): the URL
// that acquires it on a name res (POST with body(res, more), where more adds
// members such as `,"wait_ms":5000`), the URL that extends and releases it,
// and the flags with which `redlockd run` holds it. lockKinds is the one
// table every rule that holds for each kind iterates.
type lockKind struct {
	name       string
	acquireURL func(res string) string
	body       func(res, more string) string
	url        func(res string) string
	runArgs    func(res string) []string
}

func lockURL(res string) string { return "/locks/" + res }

var lockKinds = []lockKind{
	{"lock", lockURL, func(_, more string) string { return `{"owner":"w"` + more + `}` }, lockURL,
		func(res string) []string { return []string{"--resource", res} }},
	{"read", lockURL, func(_, more string) string { return `{"mode":"read"` + more + `}` }, lockURL,
		func(res string) []string { return []string{"--resource", res, "--read"} }},
	{"multi", func(string) string { return "/locks" },
		func(res, more string) string { return multiBody([]string{res, res + ".b"}, more) },
		func(res string) string { return multiPath([]string{res, res + ".b"}) },
		func(res string) []string { return []string{"--resource", res, "--resource", res + ".b"} }},
	{"semaphore", func(res string) string { return "/semaphores/" + res },
		func(_, more string) string { return `{"limit":1` + more + `}` },
		func(res string) string { return "/semaphores/" + res },
		func(res string) []string { return []string{"--semaphore", res, "--limit", "1"} }},
}

// keptOut is the kind of acquire that a holder of k keeps waiting: k
// itself, but a writer for a reader (readers share).
func (k lockKind) keptOut() lockKind {
	if k.name == "read" {
		return lockKinds[0]
	}
	return k
}

// acquire sends the kind's acquire of res.
func (k lockKind) acquire(t testing.TB, g *Gateway, res, more string) *Resp {
	t.Helper()
	return g.do(t, http.MethodPost, k.acquireURL(res), k.body(res, more))
}

// TestKindsAcquisitionsMetric: every kind's acquire counts in
// redlockd_acquisitions_total by outcome, a 201 as acquired and a 409 as
// held; a listing (GET /locks) is no acquire (docs/operations.md
// "Monitoring").
func TestKindsAcquisitionsMetric(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, startCluster(t, 3))
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			res := resourceName(t)
			before := scrapeMetrics(t, gw)
			wantStatus(t, k.acquire(t, gw, res, ""), http.StatusCreated)
			w := k.keptOut()
			wantProblem(t, w.acquire(t, gw, res, ""), http.StatusConflict, "lock-held")
			wantStatus(t, gw.do(t, http.MethodGet, "/locks", ""), http.StatusOK)
			after := scrapeMetrics(t, gw)
			for _, outcome := range []string{"acquired", "held"} {
				if d := after.value("redlockd_acquisitions_total", "outcome", outcome) -
					before.value("redlockd_acquisitions_total", "outcome", outcome); d != 1 {
					t.Errorf("redlockd_acquisitions_total{outcome=%q} moved by %v, want 1", outcome, d)
				}
			}
		})
	}
}

// TestKindsQuarantine: on a cluster whose nodes all just started, every
// kind's acquire is 503 quorum-unavailable with Retry-After, and no lock or
// reader is left behind (docs/operations.md "Restarts": restart quarantine).
func TestKindsQuarantine(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gw := startUnready(t, nodes, "--restart-quarantine", "on")
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			res := resourceName(t)
			r := k.acquire(t, gw, res, "")
			wantProblem(t, r, http.StatusServiceUnavailable, "quorum-unavailable")
			retryAfter(t, r)
		})
	}
	// Only fence counters and a semaphore's limit may stay: no lock, no reader.
	if snap := keySnapshot(t, nodes); strings.Contains(snap, ":lock:") || strings.Contains(snap, ":readers:") {
		t.Errorf("a refused acquire left a lock behind:\n%s", snap)
	}
}

// TestRunKindsLockLost: `redlockd run` holding any kind exits 76 when its
// keys vanish (FLUSHALL on every node) and the next extension is refused
// (docs/clients.md "`redlockd run` (shell scripts, cron jobs)").
func TestRunKindsLockLost(t *testing.T) {
	t.Parallel()
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			nodes := startCluster(t, 3) // flushed: the kinds do not share it
			g := startGateway(t, nodes)
			args := append([]string{"run", "--url", g.URL, "--ttl", "1s", "--grace", "1s"}, k.runArgs(resourceName(t))...)
			p := runProc(t, nil, append(args, "--", "sh", "-c", `echo ready; while :; do sleep 0.1; done`)...)
			p.waitLine("ready", 30*time.Second)
			for _, n := range nodes {
				if err := n.Client().FlushAll(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			p.wantExit(runLockLost, 20*time.Second)
			if !strings.Contains(p.errs.String(), "lost") {
				t.Errorf("stderr %q does not say the lock was lost", p.errs.String())
			}
		})
	}
}

// TestKindsFIFO: on one gateway, waiters of every kind are served first come,
// first served, and an acquire that does not wait does not jump the queue;
// behind a writer, waiting writers and readers are each served in their turn,
// the readers no earlier (docs/safety.md
// "Guarantees and limits, in plain words": waiting; docs/read-write-locks.md "Waking";
// docs/semaphores.md "The API").
func TestKindsFIFO(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, startCluster(t, 3))
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			res := resourceName(t)
			holder, waiters := k, []lockKind{k, k, k, k}
			if k.name == "read" {
				holder, waiters = lockKinds[0], []lockKind{lockKinds[0], k, lockKinds[0], k}
			}
			tok := holder.acquire(t, gw, res, `,"ttl_ms":20000`)
			wantStatus(t, tok, http.StatusCreated)
			served := make(chan int, len(waiters))
			var wg sync.WaitGroup
			defer wg.Wait()
			for i, w := range waiters {
				wg.Go(func() {
					r, err := gw.try(http.MethodPost, w.acquireURL(res), w.body(res, `,"ttl_ms":20000,"wait_ms":20000`))
					if err == nil && r.Status == http.StatusCreated {
						served <- i
						token, _ := r.JSON["token"].(string)
						r, err = gw.try(http.MethodDelete, w.url(res), "", "Lock-Token", token)
					}
					if err != nil || r.Status >= 300 {
						t.Errorf("waiter %d: %v %v", i, r, err)
						served <- -1
					}
				})
				eventually(t, 10*time.Second, "the waiter in the queue", func() bool {
					return scrapeMetrics(t, gw).value("redlockd_waiters") == float64(i+1)
				})
			}
			if k.name != "read" { // a newcomer's reader would not conflict
				wantProblem(t, k.acquire(t, gw, res, ""), http.StatusConflict, "lock-held")
			}
			wantStatus(t, gw.do(t, http.MethodDelete, holder.url(res), "", "Lock-Token", tok.str(t, "token")), http.StatusNoContent)
			for want := range waiters {
				select {
				case got := <-served:
					if got != want {
						t.Fatalf("waiter %d served in turn %d", got, want)
					}
				case <-time.After(15 * time.Second):
					t.Fatalf("waiter %d not served", want)
				}
			}
		})
	}
}

// TestKindsWakeAcrossGateways: a release through one gateway wakes a waiter
// of every kind on another at once, not at the fallback poll nor at the
// holder's expiry; behind readers waits a writer, which the last reader's
// release wakes (docs/operations.md "Scaling the gateway horizontally":
// waiters; docs/read-write-locks.md "Waking").
func TestKindsWakeAcrossGateways(t *testing.T) {
	t.Parallel()
	acrossGateways(t, func(t *testing.T, a, b *Gateway, k, waiter lockKind, res string) {
		tok := k.acquire(t, a, res, `,"ttl_ms":30000`)
		wantStatus(t, tok, http.StatusCreated)
		got := make(chan *Resp, 1)
		go func() {
			r, err := b.try(http.MethodPost, waiter.acquireURL(res), waiter.body(res, `,"wait_ms":25000`))
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		eventually(t, 10*time.Second, "the waiter in the queue", func() bool {
			return scrapeMetrics(t, b).value("redlockd_waiters") == 1
		})
		start := time.Now()
		wantStatus(t, a.do(t, http.MethodDelete, k.url(res), "", "Lock-Token", tok.str(t, "token")), http.StatusNoContent)
		r := <-got
		if r == nil {
			t.FailNow()
		}
		wantStatus(t, r, http.StatusCreated)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the waiter got it %v after the release: not woken", d)
		}
		wantStatus(t, b.do(t, http.MethodDelete, waiter.url(res), "", "Lock-Token", r.str(t, "token")), http.StatusNoContent)
	})
}
