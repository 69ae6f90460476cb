package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// wantQuarantined checks /readyz and redlockd_node_quarantined: the nodes
// whose index is in q are quarantined, the others not.
func wantQuarantined(t *testing.T, gw *Gateway, nodes []*RedisNode, q map[int]bool) {
	t.Helper()
	r := gw.do(t, http.MethodGet, "/readyz", "")
	m := scrapeMetrics(t, gw)
	for i, n := range nodes {
		until := readyNode(t, r, n.Addr)["quarantined_until"]
		if (until != nil) != q[i] {
			t.Errorf("/readyz node %d quarantined_until %v, want quarantined %v: %s", i, until, q[i], r.Body)
		}
		if v, ok := m.get("redlockd_node_quarantined", "node", n.Addr); !ok || v != float64(boolInt(q[i])) {
			t.Errorf("redlockd_node_quarantined{node=%s} = %v, %v; want %d", n.Addr, v, ok, boolInt(q[i]))
		}
	}
}

// TestQAQuarantinedNodes: two nodes restart while a lock is held, one empty
// after a crash and one after a clean SHUTDOWN with its data on disk
// (appendfsync always): both are quarantined (/readyz and the gauge), do
// not count in locked_nodes or held_nodes, get the lock put back by extend,
// and have it removed by release; once max TTL is over they vote again.
func TestQAQuarantinedNodes(t *testing.T) {
	const maxTTL = 3 * time.Second
	nodes := append(startCluster(t, 4), nodesOf(redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always"))...)
	gw := startUnready(t, nodes, "--restart-quarantine", "on", "--default-ttl", "1s", "--max-ttl", maxTTL.String(),
		"--node-timeout", nodeTimeout.String())
	gw.waitReady(t)
	// Nodes started just now are quarantined until they have been up for
	// max TTL too (their uptime is all the gateway knows).
	eventually(t, maxTTL+3*time.Second, "every node out of quarantine", func() bool {
		r := gw.do(t, http.MethodGet, "/readyz", "")
		for _, n := range nodes {
			if readyNode(t, r, n.Addr)["quarantined_until"] != nil {
				return false
			}
		}
		return true
	})
	wantQuarantined(t, gw, nodes, nil)
	res := resourceName(t)
	tok := lock(t, gw, res, `{"ttl_ms":3000}`).str(t, "token")
	waitHolders(t, nodes, res, tok, 5)

	nodes[0].Restart()
	_ = nodes[4].Client().Do(context.Background(), "SHUTDOWN").Err() // the connection closes: no reply
	nodes[4].Restart()
	restarted := time.Now()
	if got := holders(t, nodes, res, tok); len(got) != 4 || got[3] != 4 {
		t.Fatalf("after the restarts the token is on %v, want every node but the empty one", got)
	}
	// The first request reconnects to both: they answer, but do not vote.
	// Its release loads release.lua on them (their script caches are
	// empty), so that the release checked below needs no EVAL fallback.
	other := resourceName(t) + "-other"
	l := lock(t, gw, other, "")
	wantCount(t, l, "locked_nodes", 3, 3)
	wantStatus(t, release(t, gw, other, l.str(t, "token")), http.StatusNoContent)
	wantQuarantined(t, gw, nodes, map[int]bool{0: true, 4: true})

	var e *Resp
	eventually(t, 2*time.Second, "extend puts the lock back on the quarantined empty node", func() bool {
		e = extend(t, gw, res, tok, `{"ttl_ms":3000}`)
		wantStatus(t, e, http.StatusOK)
		return len(holders(t, nodes, res, tok)) == 5
	})
	if got := e.num(t, "locked_nodes"); got != 3 {
		t.Errorf("extend: locked_nodes %d, want 3 (quarantined nodes do not count)", got)
	}
	if got := inspect(t, gw, res).num(t, "held_nodes"); got != 3 {
		t.Errorf("inspect: held_nodes %d, want 3 (quarantined nodes do not count)", got)
	}
	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	eventually(t, 2*time.Second, "release removes the lock from every node, quarantined ones too", func() bool {
		return len(holders(t, nodes, res, tok)) == 0
	})
	if el := time.Since(restarted); el > maxTTL-time.Second {
		t.Fatalf("the checks took %v: the quarantine (%v) is nearly over", el, maxTTL)
	}

	eventually(t, maxTTL+3*time.Second, "the quarantine ends", func() bool {
		r := gw.do(t, http.MethodGet, "/readyz", "")
		return readyNode(t, r, nodes[0].Addr)["quarantined_until"] == nil && readyNode(t, r, nodes[4].Addr)["quarantined_until"] == nil
	})
	wantQuarantined(t, gw, nodes, nil)
	// They vote again: with nodes 1 and 2 down, a lock needs both.
	nodes[1].Kill()
	nodes[2].Kill()
	lock(t, gw, resourceName(t), "")
}

// TestQAReplicaRoundTrip: a node made a replica and a master again between
// two health checks (no request in between) may have lost its keys to the
// sync: it is quarantined for max TTL all the same (its master_replid
// changed), and says so in /readyz and the gauge.
func TestQAReplicaRoundTrip(t *testing.T) {
	const maxTTL = 3 * time.Second
	nodes := startCluster(t, 5)
	gw := startUnready(t, nodes, "--restart-quarantine", "on", "--default-ttl", "1s", "--max-ttl", maxTTL.String(),
		"--node-timeout", nodeTimeout.String())
	gw.waitReady(t)
	m := startRedis(t)
	redisDo(t, nodes[0], "REPLICAOF", "127.0.0.1", m.Port)
	redisDo(t, nodes[0], "REPLICAOF", "NO", "ONE")
	promoted := time.Now()
	eventually(t, 3*time.Second, "the former replica quarantined", func() bool {
		return readyNode(t, gw.do(t, http.MethodGet, "/readyz", ""), nodes[0].Addr)["quarantined_until"] != nil
	})
	wantQuarantined(t, gw, nodes, map[int]bool{0: true})
	r := gw.do(t, http.MethodGet, "/readyz", "")
	checkQuarantine(t, r, nodes[0], promoted, maxTTL, time.Second)
}

// TestQAPausedNodeReadyz: a paused node (its socket accepts, nothing
// answers) costs no request, its timeouts count in
// redlockd_node_command_errors_total, and /readyz and redlockd_node_up show
// it down, with why, once a health check times out; after SIGCONT it is up
// again.
func TestQAPausedNodeReadyz(t *testing.T) {
	nodes, gw := startFaultGateway(t)
	nodes[1].Pause()
	a := acquire(t, gw, resourceName(t), "")
	wantStatus(t, a, http.StatusCreated)
	wantFast(t, a)
	// Its command timed out (after the answer, in the background): a
	// failed call of the node in the metrics, as a refused one is.
	eventually(t, 3*time.Second, "the paused node's timeout in redlockd_node_command_errors_total", func() bool {
		v, _ := scrapeMetrics(t, gw).get("redlockd_node_command_errors_total", "node", nodes[1].Addr)
		return v >= 1
	})
	nodeUp := func(up bool) bool {
		r := gw.do(t, http.MethodGet, "/readyz", "")
		st := readyNode(t, r, nodes[1].Addr)
		errText, _ := st["err"].(string)
		v, _ := scrapeMetrics(t, gw).get("redlockd_node_up", "node", nodes[1].Addr)
		return r.Status == http.StatusOK && st["up"] == up && v == float64(boolInt(up)) &&
			(up || errText == "no answer within the node timeout ("+nodeTimeout.String()+")")
	}
	// The health interval is 1s.
	eventually(t, 3*time.Second, "/readyz and the gauge show the paused node down", func() bool { return nodeUp(false) })
	nodes[1].Resume()
	eventually(t, 3*time.Second, "/readyz and the gauge show the resumed node up", func() bool { return nodeUp(true) })
}

// TestQAMajorityPausedEveryRoute: with 3 of 5 nodes paused, the routes
// that TestPausedNodes and TestMultiUnavailable do not try — semaphores,
// read locks, HEAD and the listing — answer 503 quorum-unavailable with
// Retry-After, within about the node timeout (the listing asks the nodes
// one after another: one node timeout per node it skips), and the holders
// keep their locks.
func TestQAMajorityPausedEveryRoute(t *testing.T) {
	nodes, gw := startFaultGateway(t)
	res := resourceName(t)
	ptok := []string{"Lock-Token", permit(t, gw, res+"-s", `{"limit":2,"ttl_ms":20000}`).str(t, "token")}
	rtok := []string{"Lock-Token", lock(t, gw, res+"-r", `{"mode":"read","ttl_ms":20000}`).str(t, "token")}
	for _, n := range nodes[:3] {
		n.Pause()
	}
	const wait = 200 * time.Millisecond
	for _, c := range []struct {
		r     *Resp
		limit time.Duration
	}{
		{gw.do(t, http.MethodGet, "/locks", ""), 3*nodeTimeout + fastEnough},
		{acquirePermit(t, gw, res+"-s", `{"limit":2}`), fastEnough},
		{acquirePermit(t, gw, res+"-s2", `{"limit":2,"wait_ms":200}`), wait + fastEnough},
		{gw.do(t, http.MethodPatch, "/semaphores/"+res+"-s", `{"ttl_ms":20000}`, ptok...), fastEnough},
		{inspectSemaphore(t, gw, res+"-s"), fastEnough},
		{gw.do(t, http.MethodHead, "/semaphores/"+res+"-s", ""), fastEnough},
		{gw.do(t, http.MethodHead, "/locks/"+res+"-r", ""), fastEnough},
		{acquire(t, gw, res+"-r", `{"mode":"read"}`), fastEnough},
		{acquire(t, gw, res+"-r2", `{"mode":"read","wait_ms":200}`), wait + fastEnough},
		{gw.do(t, http.MethodPatch, "/locks/"+res+"-r", `{"ttl_ms":20000}`, rtok...), fastEnough},
	} {
		if c.r.Method == http.MethodHead {
			wantStatus(t, c.r, http.StatusServiceUnavailable)
		} else {
			wantProblem(t, c.r, http.StatusServiceUnavailable, "quorum-unavailable")
		}
		retryAfter(t, c.r)
		wantWithin(t, c.r, c.limit)
	}
	for _, n := range nodes[:3] {
		n.Resume()
	}
	eventually(t, 5*time.Second, "the nodes answer again", func() bool {
		return inspect(t, gw, res+"-r").Status == http.StatusOK
	})
	wantStatus(t, gw.do(t, http.MethodDelete, "/semaphores/"+res+"-s", "", ptok...), http.StatusNoContent)
	wantStatus(t, release(t, gw, res+"-r", rtok[1]), http.StatusNoContent)
}
