package tests

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// lockKinds are the four lock-like things (SPEC §7, §8), each as an acquire
// of a fresh name with body members more (e.g. `,"ttl_ms":5000`) that
// returns the name it took.
var lockKinds = []struct {
	name    string
	acquire func(t *testing.T, g *Gateway, res, more string) *Resp
}{
	{"lock", func(t *testing.T, g *Gateway, res, more string) *Resp {
		return acquire(t, g, res, `{"owner":"w"`+more+`}`)
	}},
	{"read", func(t *testing.T, g *Gateway, res, more string) *Resp {
		return acquire(t, g, res, `{"mode":"read"`+more+`}`)
	}},
	{"multi", func(t *testing.T, g *Gateway, res, more string) *Resp {
		return g.do(t, http.MethodPost, "/locks", multiBody([]string{res, res + ".b"}, more))
	}},
	{"semaphore", func(t *testing.T, g *Gateway, res, more string) *Resp {
		return acquirePermit(t, g, res, `{"limit":1`+more+`}`)
	}},
}

// TestKindsAcquisitionsMetric: every kind's acquire counts in
// redlockd_acquisitions_total by outcome, "metrics ... as for locks"
// (SPEC §7, §8): a 201 as acquired, a 409 as held.
func TestKindsAcquisitionsMetric(t *testing.T) {
	gw := startGateway(t, startCluster(t, 3))
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			res := resourceName(t)
			before := scrapeMetrics(t, gw)
			wantStatus(t, k.acquire(t, gw, res, ""), http.StatusCreated)
			if k.name == "read" { // readers share: a writer is refused
				wantProblem(t, acquire(t, gw, res, ""), http.StatusConflict, "lock-held")
			} else {
				wantProblem(t, k.acquire(t, gw, res, ""), http.StatusConflict, "lock-held")
			}
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
// kind's acquire is 503 quorum-unavailable with Retry-After (restart
// quarantine, SPEC §2, §7, §8), and no lock or reader is left behind.
func TestKindsQuarantine(t *testing.T) {
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

// TestRunKindsLockLost: `redlockd run` holding a read lock, the locks of
// two resources or a permit exits 76 when its keys vanish (FLUSHALL on
// every node) and the next extension is refused, as with a lock (SPEC §5,
// §7, §8).
func TestRunKindsLockLost(t *testing.T) {
	nodes := startCluster(t, 3)
	g := startGateway(t, nodes)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"read", []string{"--resource", "r", "--read"}},
		{"multi", []string{"--resource", "m1", "--resource", "m2"}},
		{"semaphore", []string{"--semaphore", "s", "--limit", "2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"run", "--url", g.URL, "--ttl", "1s", "--grace", "1s"}, c.args...)
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

// TestMultiNotOwnerHeldByOther: extend and release of the locks of several
// resources with a token that holds none of them, while another token holds
// one of them, are 409 not-owner with lock_state held-by-other (another
// token holds the lock: the critical section may not have been exclusive),
// whatever the place of that resource in the list.
func TestMultiNotOwnerHeldByOther(t *testing.T) {
	gw := startGateway(t, startCluster(t, 3))
	free, held := resourceName(t), resourceName(t)
	lock(t, gw, held, `{"ttl_ms":20000}`)
	path := multiPath([]string{free, held})
	for _, method := range []string{http.MethodPatch, http.MethodDelete} {
		r := gw.do(t, method, path, "", "Lock-Token", clientToken(t))
		wantProblem(t, r, http.StatusConflict, "not-owner")
		if got := r.str(t, "lock_state"); got != "held-by-other" {
			t.Errorf("%s %s: lock_state %q, want held-by-other", method, path, got)
		}
	}
}
