package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// nodeTimeout is the gateway's node timeout in the tests of faults (nodes
// killed, paused, restarted, cut off, slow), where how long a request waits
// for a node is the subject; the faults' delays derive from it. fastEnough
// bounds any request while nodes are down, paused or slow: a round's node
// timeout, the undo's after a failed acquire, and a margin a loaded 2-core
// machine meets (docs/operations.md "TTL, node timeout and drift").
const (
	nodeTimeout = 500 * time.Millisecond
	fastEnough  = 2*nodeTimeout + 2*time.Second
)

func startFaultGateway(t *testing.T) ([]*RedisNode, *Gateway) {
	t.Helper()
	nodes := startCluster(t, 5)
	return nodes, startGateway(t, nodes, "--node-timeout", nodeTimeout.String())
}

func wantFast(t *testing.T, r *Resp) {
	t.Helper()
	if r.Elapsed > fastEnough {
		t.Errorf("%s %s took %v, want < %v (node timeout %v)", r.Method, r.Path, r.Elapsed, fastEnough, nodeTimeout)
	}
}

// TestFaults: with nodes down, paused or restarted, every answer is right and
// takes about the node timeout at most. With 2 of 5 down a lock is acquired,
// inspected, extended and released, a stranger's release is 409, and /readyz
// stays 200 showing them down; with 3 of 5 down every call is 503
// quorum-unavailable (an inspect, extend or release that cannot tell is 503,
// never held:false or 409), also with wait_ms, /readyz is 503 and /healthz
// 200; a paused node holds up no request or waiter and votes again once
// resumed; an extend puts the lock back on a restarted node but never
// resurrects a lock lost on a quorum; fencing tokens grow across single
// restarts (docs/safety.md "What is guaranteed" and
// "What happens in each fault"; openapi.yaml DELETE /locks/{resource}).
func TestFaults(t *testing.T) {
	t.Parallel()
	t.Run("TwoOfFiveDown", func(t *testing.T) {
		nodes, gw := startFaultGateway(t)
		nodes[1].Kill()
		nodes[3].Kill()
		res := resourceName(t)

		start := time.Now()
		a := acquire(t, gw, res, `{"ttl_ms":10000}`)
		wantStatus(t, a, http.StatusCreated)
		wantFast(t, a)
		checkLockBody(t, a, start, res, 10000, 3)
		tok := a.str(t, "token")

		i := inspect(t, gw, res)
		wantStatus(t, i, http.StatusOK)
		wantFast(t, i)
		if got := i.num(t, "held_nodes"); got != 3 {
			t.Errorf("held_nodes %d, want 3", got)
		}

		e := extend(t, gw, res, tok, `{"ttl_ms":10000}`)
		wantStatus(t, e, http.StatusOK)
		wantFast(t, e)
		if got := e.num(t, "locked_nodes"); got != 3 {
			t.Errorf("extend locked_nodes %d, want 3", got)
		}

		// matched 0 + silent 2 < quorum: certainly not the owner.
		w := release(t, gw, res, clientToken(t))
		wantProblem(t, w, http.StatusConflict, "not-owner")
		if got := w.str(t, "lock_state"); got != "held-by-other" {
			t.Errorf("lock_state %q, want held-by-other", got)
		}

		d := release(t, gw, res, tok)
		wantStatus(t, d, http.StatusNoContent)
		wantFast(t, d)
		wantNotHeld(t, inspectAnswered(t, gw, res))

		// Two down of five is still ready.
		var r *Resp
		eventually(t, 10*time.Second, "/readyz shows the two dead nodes down", func() bool {
			r = gw.do(t, http.MethodGet, "/readyz", "")
			return r.Status == http.StatusOK && countUp(r) == 3
		})
		checkReadyNodes(t, r, nodes, map[int]bool{1: true, 3: true})
	})

	t.Run("ThreeOfFiveDown", func(t *testing.T) {
		nodes, gw := startFaultGateway(t)
		for _, i := range []int{0, 2, 4} {
			nodes[i].Kill()
		}
		res := resourceName(t)

		a := acquire(t, gw, res, `{"ttl_ms":10000}`)
		wantProblem(t, a, http.StatusServiceUnavailable, "quorum-unavailable")
		wantFast(t, a)
		retryAfter(t, a)
		// The failed attempt is cleaned up on the nodes that are alive
		// (late grants in the background), well before its TTL.
		eventually(t, 5*time.Second, "the failed acquire's key removed", func() bool {
			return !containsLockKey(keySnapshot(t, nodes), res)
		})

		// Nobody can tell whether it is free: not held:false.
		i := inspect(t, gw, res)
		wantProblem(t, i, http.StatusServiceUnavailable, "quorum-unavailable")
		wantFast(t, i)

		eventually(t, 10*time.Second, "/readyz 503 unready", func() bool {
			return gw.do(t, http.MethodGet, "/readyz", "").Status == http.StatusServiceUnavailable
		})
		r := gw.do(t, http.MethodGet, "/readyz", "")
		wantStatus(t, r, http.StatusServiceUnavailable)
		if got := r.str(t, "status"); got != "unready" {
			t.Errorf("/readyz status %q, want unready", got)
		}
		eventually(t, 10*time.Second, "/readyz shows three nodes down", func() bool {
			r = gw.do(t, http.MethodGet, "/readyz", "")
			return countUp(r) == 2
		})
		checkReadyNodes(t, r, nodes, map[int]bool{0: true, 2: true, 4: true})

		// Liveness does not depend on Redis.
		wantStatus(t, gw.do(t, http.MethodGet, "/healthz", ""), http.StatusOK)

		// wait_ms does not turn an outage into a long hang past the wait.
		w := acquire(t, gw, res, `{"wait_ms":300}`)
		wantProblem(t, w, http.StatusServiceUnavailable, "quorum-unavailable")
		if w.Elapsed > 300*time.Millisecond+fastEnough {
			t.Errorf("acquire with wait_ms 300 during an outage took %v", w.Elapsed)
		}
	})

	t.Run("ReleaseWithoutQuorumIs503", func(t *testing.T) {
		nodes, gw := startFaultGateway(t)
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":20000}`)
		tok := a.str(t, "token")
		waitHolders(t, nodes, res, tok, 5)
		for _, i := range []int{0, 1, 2} {
			nodes[i].Kill()
		}

		// matched 2 < quorum, matched + silent 5 ≥ quorum: unknown.
		d := release(t, gw, res, tok)
		wantProblem(t, d, http.StatusServiceUnavailable, "quorum-unavailable")
		wantFast(t, d)
		e := extend(t, gw, res, tok, `{"ttl_ms":20000}`)
		wantProblem(t, e, http.StatusServiceUnavailable, "quorum-unavailable")
		wantFast(t, e)
		// A wrong token: matched 0 + silent 3 ≥ quorum, still unknown.
		w := release(t, gw, res, clientToken(t))
		wantProblem(t, w, http.StatusServiceUnavailable, "quorum-unavailable")

		// The dead nodes come back empty: now the token is on at most two
		// nodes and nobody is silent, so it certainly lost the lock.
		for _, i := range []int{0, 1, 2} {
			nodes[i].Restart()
		}
		var r *Resp
		eventually(t, 5*time.Second, "release decides once the nodes are back", func() bool {
			r = release(t, gw, res, tok)
			return r.Status != http.StatusServiceUnavailable
		})
		wantProblem(t, r, http.StatusConflict, "not-owner")
	})

	t.Run("PausedNode", func(t *testing.T) {
		nodes, gw := startFaultGateway(t)
		nodes[2].Pause()
		for range 3 {
			res := resourceName(t)
			a := acquire(t, gw, res, `{"ttl_ms":10000}`)
			wantStatus(t, a, http.StatusCreated)
			wantFast(t, a)
			wantCount(t, a, "locked_nodes", 3, 4)
			tok := a.str(t, "token")
			i := inspect(t, gw, res)
			wantStatus(t, i, http.StatusOK)
			wantFast(t, i)
			e := extend(t, gw, res, tok, `{"ttl_ms":10000}`)
			wantStatus(t, e, http.StatusOK)
			wantFast(t, e)
			d := release(t, gw, res, tok)
			wantStatus(t, d, http.StatusNoContent)
			wantFast(t, d)
		}
		// A waiter is not stalled by the paused node either.
		res := resourceName(t)
		lock(t, gw, res, `{"ttl_ms":300}`)
		w := acquire(t, gw, res, `{"wait_ms":5000}`)
		wantStatus(t, w, http.StatusCreated)
		if w.Elapsed > 300*time.Millisecond+2*fastEnough {
			t.Errorf("waiter for a 300 ms lock took %v with one node paused", w.Elapsed)
		}

		// The resumed node votes again: with two others down, no lock
		// without it.
		nodes[2].Resume()
		nodes[0].Kill()
		nodes[1].Kill()
		eventually(t, 5*time.Second, "resumed node votes again", func() bool {
			return acquire(t, gw, resourceName(t), `{"ttl_ms":1000}`).Status == http.StatusCreated
		})
	})

	t.Run("ExtendReassertsRestartedNode", func(t *testing.T) {
		nodes, gw := startFaultGateway(t)
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":20000}`).str(t, "token")
		waitHolders(t, nodes, res, tok, 5)
		nodes[0].Restart()
		if got := holders(t, nodes, res, tok); len(got) != 4 {
			t.Fatalf("after restarting node 0 the token is on %v, want the other 4", got)
		}
		eventually(t, 5*time.Second, "extend puts the key back on the restarted node", func() bool {
			wantStatus(t, extend(t, gw, res, tok, `{"ttl_ms":20000}`), http.StatusOK)
			return len(holders(t, nodes, res, tok)) == 5
		})
	})

	t.Run("ExtendDoesNotResurrect", func(t *testing.T) {
		nodes, gw := startFaultGateway(t)
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":20000}`).str(t, "token")
		waitHolders(t, nodes, res, tok, 5)
		for _, i := range []int{0, 1, 2} {
			nodes[i].Restart()
		}
		var e *Resp
		eventually(t, 5*time.Second, "extend decides", func() bool {
			e = extend(t, gw, res, tok, `{"ttl_ms":20000}`)
			if e.Status == http.StatusOK {
				t.Fatalf("extend of a lock lost on 3 of 5 nodes succeeded: %s", e.Body)
			}
			return e.Status != http.StatusServiceUnavailable
		})
		wantProblem(t, e, http.StatusConflict, "not-owner")
		for _, i := range holders(t, nodes, res, tok) {
			if i < 3 {
				t.Errorf("a failed extend put the token back on restarted node %d", i)
			}
		}
	})

	t.Run("FencingSurvivesSingleRestarts", func(t *testing.T) {
		nodes, gw := startFaultGateway(t)
		res := resourceName(t)
		var last int64
		for i := range 2 * len(nodes) {
			var a *Resp
			eventually(t, 5*time.Second, "acquire after a restart", func() bool {
				a = acquire(t, gw, res, `{"ttl_ms":5000}`)
				return a.Status != http.StatusServiceUnavailable
			})
			wantStatus(t, a, http.StatusCreated)
			f := a.num(t, "fencing_token")
			if f <= last {
				t.Fatalf("acquisition %d (after restarting node %d): fencing_token %d, want > %d",
					i, (i+len(nodes)-1)%len(nodes), f, last)
			}
			last = f
			wantStatus(t, release(t, gw, res, a.str(t, "token")), http.StatusNoContent)
			nodes[i%len(nodes)].Restart()
		}
	})
}

// countUp counts the nodes /readyz shows up.
func countUp(r *Resp) int {
	list, _ := r.JSON["nodes"].([]any)
	n := 0
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["up"] == true {
			n++
		}
	}
	return n
}

// containsLockKey reports whether a keySnapshot lists resource's lock key.
func containsLockKey(snap, resource string) bool {
	return strings.Contains(snap, `"`+lockKey(resource)+`"`)
}

// TestRestartQuarantine: with quarantine on, a fresh cluster grants nothing
// until its nodes have been up for max TTL, and /readyz says when each
// quarantine ends; a node restarted later does not vote until it has been up
// for max TTL from its restart (a lock taken just before the crash may live
// that long on the other nodes): with two other nodes down its vote decides,
// so acquires are 503 until then and 201 after (docs/operations.md
// "Restarts"; docs/safety.md "What happens in each fault").
func TestRestartQuarantine(t *testing.T) {
	t.Parallel()
	const (
		maxTTL = 5 * time.Second // the start (nodes, gateway) must take under half of it, on a busy machine too
		slack  = 200 * time.Millisecond
	)
	beforeNodes := time.Now()
	nodes := startCluster(t, 5)
	gw := startUnready(t, nodes, "--restart-quarantine", "on", "--default-ttl", "1s", "--max-ttl", maxTTL.String(),
		"--node-timeout", nodeTimeout.String())

	r := gw.do(t, http.MethodGet, "/readyz", "")
	if el := time.Since(beforeNodes); el > maxTTL/2 {
		t.Fatalf("the nodes and the gateway took %v to start: the quarantine (%v) is nearly over", el, maxTTL)
	}
	wantStatus(t, r, http.StatusServiceUnavailable)
	if got := r.str(t, "status"); got != "unready" {
		t.Errorf("/readyz status %q during quarantine, want unready", got)
	}
	checkQuarantine(t, r, nodes[0], beforeNodes, maxTTL, slack)

	res := resourceName(t)
	a := acquire(t, gw, res, "")
	wantProblem(t, a, http.StatusServiceUnavailable, "quorum-unavailable")
	retryAfter(t, a)

	var b *Resp
	eventually(t, maxTTL+5*time.Second, "first lock after the quarantine", func() bool {
		b = acquire(t, gw, res, "")
		return b.Status != http.StatusServiceUnavailable
	})
	wantStatus(t, b, http.StatusCreated)
	if el := time.Since(beforeNodes); el < maxTTL-slack {
		t.Errorf("first lock granted %v after the nodes started, want ≥ max TTL %v", el, maxTTL)
	}
	gw.waitReady(t)
	wantStatus(t, release(t, gw, res, b.str(t, "token")), http.StatusNoContent)

	// Restart node 0 late in a wall-clock second and let the gateway
	// reconnect early in the next one: Redis's uptime_in_seconds is
	// floor(now) - floor(start), so it already says 1 after a few ms. The
	// quarantine must still last max TTL from the restart.
	sleepUntilFraction(930 * time.Millisecond)
	restarted := time.Now()
	nodes[0].Restart()
	sleepUntilFraction(100 * time.Millisecond)
	for range 3 { // the gateway reconnects to node 0 here; four others vote
		lock(t, gw, resourceName(t), "")
	}
	r = gw.do(t, http.MethodGet, "/readyz", "")
	wantStatus(t, r, http.StatusOK)
	checkQuarantine(t, r, nodes[0], restarted, maxTTL, slack)

	nodes[3].Kill()
	nodes[4].Kill()
	for range 3 { // nodes 1 and 2 grant, node 0 is quarantined
		wantProblem(t, acquire(t, gw, resourceName(t), ""), http.StatusServiceUnavailable, "quorum-unavailable")
	}
	eventually(t, maxTTL+5*time.Second, "restarted node votes again after max TTL", func() bool {
		return acquire(t, gw, resourceName(t), "").Status == http.StatusCreated
	})
	if el := time.Since(restarted); el < maxTTL-slack {
		t.Errorf("restarted node voted again %v after its restart, want ≥ max TTL %v", el, maxTTL)
	}
}

// sleepUntilFraction sleeps until the wall clock is f past a whole second.
func sleepUntilFraction(f time.Duration) {
	d := f - time.Duration(time.Now().Nanosecond())
	if d < 0 {
		d += time.Second
	}
	time.Sleep(d)
}

// checkQuarantine checks that /readyz shows node quarantined until at least
// since + maxTTL - slack (since being no later than the node's start) and
// not much later.
func checkQuarantine(t *testing.T, r *Resp, node *RedisNode, since time.Time, maxTTL, slack time.Duration) {
	t.Helper()
	list, _ := r.JSON["nodes"].([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		if m["addr"] != node.Addr {
			continue
		}
		q, ok := m["quarantined_until"].(string)
		if !ok {
			t.Fatalf("/readyz node %s quarantined_until = %v, want a time: %s", node.Addr, m["quarantined_until"], r.Body)
		}
		if !rfc3339Ms.MatchString(q) {
			t.Errorf("quarantined_until %q is not RFC 3339 UTC with milliseconds", q)
		}
		until, err := time.Parse(time.RFC3339Nano, q)
		if err != nil {
			t.Fatalf("quarantined_until %q: %v", q, err)
		}
		if lo, hi := since.Add(maxTTL-slack), since.Add(maxTTL+2*time.Second); until.Before(lo) || until.After(hi) {
			t.Errorf("quarantined_until %s is %v after the node started, want max TTL %v",
				q, until.Sub(since).Round(time.Millisecond), maxTTL)
		}
		return
	}
	t.Fatalf("/readyz has no node %s: %s", node.Addr, r.Body)
}

// TestPausedNodeShownDown: a paused node (its socket accepts, nothing
// answers) costs no request, its timeouts count in
// redlockd_node_command_errors_total, and /readyz and redlockd_node_up show
// it down, with why, once a health check times out; after SIGCONT it is up
// again (docs/safety.md "What happens in each fault"; docs/operations.md
// "Monitoring").
func TestPausedNodeShownDown(t *testing.T) {
	t.Parallel()
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

// TestPausedMajorityEveryRoute: with 3 of 5 nodes paused, the routes that
// TestPausedNodes and TestMultiUnavailable do not try (semaphores, read
// locks, HEAD and the listing) answer 503 quorum-unavailable with Retry-After
// within about the node timeout (the listing asks the nodes one after
// another: one node timeout per node it skips), and the holders keep their
// locks (docs/safety.md "What happens in each fault": majority paused).
func TestPausedMajorityEveryRoute(t *testing.T) {
	t.Parallel()
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
