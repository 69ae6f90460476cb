package tests

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// Safety under process faults: SIGKILL of a minority and of a majority,
// SIGSTOP/SIGCONT, kill and immediate restart on the same port, and the seed
// scenario that restart quarantine exists for.

// validFor is how long the lock in an acquire or extend answer is valid,
// from the moment the request was sent.
func validFor(t testing.TB, r *Resp) time.Duration {
	t.Helper()
	return time.Duration(r.num(t, "validity_ms")) * time.Millisecond
}

// timed runs f and returns the time just before it.
func timed(f func() *Resp) (*Resp, time.Time) {
	sent := time.Now()
	return f(), sent
}

// TestKillMinorityThenMajority: with restart quarantine on, a lock survives
// the SIGKILL of a minority (others get 409, the holder extends on the
// rest); with a majority dead every call is 503 within about the node
// timeout; when the majority comes back empty at once, the lock survives on
// a minority only, and nobody else gets it before the holder's validity is
// over, because the restarted nodes do not vote for max TTL
// (docs/safety.md "What happens in each fault").
func TestKillMinorityThenMajority(t *testing.T) {
	t.Parallel()
	const maxTTL = 2 * time.Second
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes, "--restart-quarantine", "on", "--max-ttl", maxTTL.String(),
		"--default-ttl", maxTTL.String(), "--node-timeout", nodeTimeout.String())
	gw.waitAllVoting(t, len(nodes), 10*maxTTL) // the kills below leave 3 voters only if all 5 vote
	res := resourceName(t)
	a, aSent := timed(func() *Resp { return lock(t, gw, res, `{"ttl_ms":2000}`) })
	tok, fenceA := a.str(t, "token"), a.num(t, "fencing_token")
	aEnd := aSent.Add(validFor(t, a))
	waitHolders(t, nodes, res, tok, 5)

	nodes[0].Kill()
	nodes[1].Kill()
	b := acquire(t, gw, res, "")
	wantProblem(t, b, http.StatusConflict, "lock-held")
	wantWithin(t, b, fastEnough)
	e, eSent := timed(func() *Resp { return extend(t, gw, res, tok, `{"ttl_ms":2000}`) })
	wantStatus(t, e, http.StatusOK)
	wantWithin(t, e, fastEnough)
	if got := e.num(t, "locked_nodes"); got != 3 {
		t.Errorf("extend with 2 of 5 killed: locked_nodes %d, want 3", got)
	}
	if x := eSent.Add(validFor(t, e)); x.After(aEnd) {
		aEnd = x // same TTL: the extend never shortens the lock
	}
	i := inspect(t, gw, res)
	wantStatus(t, i, http.StatusOK)
	if got := i.num(t, "held_nodes"); got != 3 {
		t.Errorf("held_nodes %d, want 3", got)
	}

	// (A release now would be 503 too, but would delete A's key on the
	// live nodes: it is not sent.)
	nodes[2].Kill()
	for _, r := range []*Resp{
		acquire(t, gw, res, ""),
		acquire(t, gw, resourceName(t), ""),
		extend(t, gw, res, tok, `{"ttl_ms":2000}`),
		inspect(t, gw, res),
	} {
		wantProblem(t, r, http.StatusServiceUnavailable, "quorum-unavailable")
		wantWithin(t, r, fastEnough)
	}

	// The majority comes back at once, empty: A's key is on nodes 3 and 4
	// only, a minority, while A's lock is still valid.
	restarted := time.Now()
	for _, n := range nodes[:3] {
		n.Restart()
	}
	if got := holders(t, nodes, res, tok); !slices.Equal(got, []int{3, 4}) {
		t.Fatalf("after the restarts the token is on nodes %v, want [3 4]", got)
	}
	b = acquire(t, gw, res, "")
	if b.Status == http.StatusCreated {
		t.Fatalf("B got the lock held by A on 2 of 5 nodes, %v before A's validity ends: %s", time.Until(aEnd), b.Body)
	}
	wantProblem(t, b, http.StatusServiceUnavailable, "quorum-unavailable")
	wantWithin(t, b, fastEnough)

	// B waits: it gets the lock once the restarted nodes have been up for
	// max TTL, after A's validity, with a greater fencing token.
	b = acquire(t, gw, res, `{"wait_ms":10000}`)
	wantStatus(t, b, http.StatusCreated)
	got := time.Now()
	if got.Before(aEnd) {
		t.Errorf("B got the lock %v before A's validity ended", aEnd.Sub(got))
	}
	if got.Before(restarted.Add(maxTTL - 200*time.Millisecond)) {
		t.Errorf("B got the lock %v after the restarts, want ≥ max TTL %v (quarantine)", got.Sub(restarted), maxTTL)
	}
	if f := b.num(t, "fencing_token"); f <= fenceA {
		t.Errorf("B's fencing_token %d, want > A's %d", f, fenceA)
	}
}

// TestPausedNodes: SIGSTOPped nodes (their sockets accept, nothing answers)
// cost each request at most about the node timeout, never a wrong answer;
// with a majority paused every call is 503; after SIGCONT the lock is intact
// (docs/safety.md "What happens in each fault").
func TestPausedNodes(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes, "--node-timeout", nodeTimeout.String())
	res := resourceName(t)
	a := lock(t, gw, res, `{"ttl_ms":30000}`)
	tok, fence := a.str(t, "token"), a.num(t, "fencing_token")
	waitHolders(t, nodes, res, tok, 5)

	var slowest time.Duration
	check := func(r *Resp) {
		t.Helper()
		wantWithin(t, r, fastEnough)
		slowest = max(slowest, r.Elapsed)
	}
	for paused := 1; paused <= 2; paused++ {
		nodes[paused-1].Pause()
		voting := int64(5 - paused)
		for range 3 {
			other := resourceName(t)
			o := acquire(t, gw, other, `{"ttl_ms":5000}`)
			wantStatus(t, o, http.StatusCreated)
			check(o)
			wantCount(t, o, "locked_nodes", 3, voting)
			d := release(t, gw, other, o.str(t, "token"))
			wantStatus(t, d, http.StatusNoContent)
			check(d)
			b := acquire(t, gw, res, "")
			wantProblem(t, b, http.StatusConflict, "lock-held")
			check(b)
			e := extend(t, gw, res, tok, `{"ttl_ms":30000}`)
			wantStatus(t, e, http.StatusOK)
			check(e)
			i := inspect(t, gw, res)
			wantStatus(t, i, http.StatusOK)
			check(i)
		}
	}
	nodes[2].Pause()
	for range 3 {
		for _, r := range []*Resp{
			acquire(t, gw, res, ""),
			acquire(t, gw, resourceName(t), ""),
			extend(t, gw, res, tok, `{"ttl_ms":30000}`),
			inspect(t, gw, res),
		} {
			wantProblem(t, r, http.StatusServiceUnavailable, "quorum-unavailable")
			check(r)
		}
	}
	t.Logf("slowest request with up to 3 of 5 nodes paused: %v (node timeout %v)", slowest, nodeTimeout)

	for _, n := range nodes[:3] {
		n.Resume()
	}
	var e *Resp
	eventually(t, 5*time.Second, "the lock is held on all 5 nodes after SIGCONT", func() bool {
		e = extend(t, gw, res, tok, `{"ttl_ms":30000}`)
		wantStatus(t, e, http.StatusOK)
		return len(holders(t, nodes, res, tok)) == 5
	})
	if got := e.num(t, "fencing_token"); got != fence {
		t.Errorf("fencing_token %d after the pauses, want %d", got, fence)
	}
	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
}

// TestRestartSamePort: with quarantine on, a node killed and restarted empty
// on the same port is quarantined (shown in /readyz until max TTL after its
// start, not counted in locked_nodes), and the fencing tokens handed out
// keep increasing, as each node in turn restarts (docs/safety.md "What
// happens in each fault"; docs/safety.md "When fencing tokens can go
// backwards").
func TestRestartSamePort(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	// Time is the subject: the quarantine must be seen before it ends.
	const maxTTL = 3 * time.Second
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes, "--restart-quarantine", "on", "--max-ttl", maxTTL.String(),
		"--default-ttl", maxTTL.String(), "--node-timeout", nodeTimeout.String())
	res := resourceName(t)
	quarantined := func(r *Resp) int {
		n := 0
		for _, node := range nodes {
			if readyNode(t, r, node.Addr)["quarantined_until"] != nil {
				n++
			}
		}
		return n
	}
	var last int64
	for i, n := range nodes {
		// At most one other node in quarantine, so that a quorum votes.
		eventually(t, 5*time.Second, "at most one node quarantined", func() bool {
			return quarantined(gw.do(t, http.MethodGet, "/readyz", "")) <= 1
		})
		restarted := time.Now()
		n.Restart()
		a := acquire(t, gw, res, `{"ttl_ms":1000}`)
		wantStatus(t, a, http.StatusCreated)
		f := a.num(t, "fencing_token")
		if f <= last {
			t.Fatalf("after restarting node %d: fencing_token %d, want > %d", i, f, last)
		}
		last = f
		if got := a.num(t, "locked_nodes"); got > 4 {
			t.Errorf("node %d restarted just now was counted: locked_nodes %d", i, got)
		}
		// A new connection finds the restart (the node's uptime): the
		// acquire may have met a pooled connection the restart closed, and
		// the next request or health check reconnects.
		var r *Resp
		eventually(t, maxTTL, fmt.Sprintf("node %d quarantined", i), func() bool {
			r = gw.do(t, http.MethodGet, "/readyz", "")
			return readyNode(t, r, n.Addr)["quarantined_until"] != nil
		})
		checkQuarantine(t, r, n, restarted, maxTTL, 200*time.Millisecond)
		wantStatus(t, release(t, gw, res, a.str(t, "token")), http.StatusNoContent)
	}
}

// TestSeedScenario: with restart quarantine on, a node that restarts empty
// does not vote, so a lock held on a bare quorum cannot go to a second
// client while it is valid (docs/safety.md "What happens in each fault",
// Node restarted empty); with it off it can, and the fencing tokens still
// order the two (docs/safety.md "When fencing tokens can go backwards").
// Three nodes r0, r1, r2 behind fault proxies; client A takes the lock
// while r0 is cut off, so A holds it on r1 and r2 only; r1 crashes and
// restarts empty at once; client B tries while A's lock is still valid.
// The subtest with quarantine off shows that the test can fail.
func TestSeedScenario(t *testing.T) {
	t.Parallel()
	const maxTTL = 2 * time.Second
	// Both clusters start now: the "on" nodes age while "off" runs, which
	// shortens the fresh-cluster quarantine "on" has to wait for.
	off, on := startCluster(t, 3), startCluster(t, 3)

	// run plays the scenario and returns A's and B's answers and the end of
	// A's validity.
	run := func(t *testing.T, nodes []*RedisNode, quarantine string) (a, b *Resp, aEnd time.Time, gw *Gateway) {
		t.Helper()
		ps := startProxies(t, nodes)
		gw = startGatewayAt(t, proxyAddrs(ps), "--restart-quarantine", quarantine,
			"--max-ttl", maxTTL.String(), "--default-ttl", maxTTL.String(), "--node-timeout", nodeTimeout.String())
		gw.waitReady(t)
		gw.waitAllVoting(t, len(nodes), 10*maxTTL) // the scenario needs all three
		res := resourceName(t)

		ps[0].Cut()
		a, aSent := timed(func() *Resp { return acquire(t, gw, res, `{"ttl_ms":2000}`) })
		wantStatus(t, a, http.StatusCreated)
		aEnd = aSent.Add(validFor(t, a))
		tok := a.str(t, "token")
		if got := holders(t, nodes, res, tok); !slices.Equal(got, []int{1, 2}) {
			t.Fatalf("A holds the lock on nodes %v, want [1 2]", got)
		}
		ps[0].Restore()

		nodes[1].Restart() // crash, and back at once with empty memory
		if got := holders(t, nodes, res, tok); !slices.Equal(got, []int{2}) {
			t.Fatalf("after r1's restart A holds the lock on nodes %v, want [2]", got)
		}
		b = acquire(t, gw, res, "")
		if time.Now().After(aEnd) {
			t.Fatalf("B's attempt ended after A's validity: too slow to show anything (A: %s)", a.Body)
		}
		return a, b, aEnd, gw
	}

	t.Run("QuarantineOff", func(t *testing.T) {
		a, b, aEnd, _ := run(t, off, "off")
		wantStatus(t, b, http.StatusCreated)
		// Fencing still orders them: r0 (cut off from A's write-back) and
		// r1 (restarted empty) have no counter, and make one from the clock.
		if b.num(t, "fencing_token") <= a.num(t, "fencing_token") {
			t.Errorf("B's fencing token %d is not above A's %d", b.num(t, "fencing_token"), a.num(t, "fencing_token"))
		}
		t.Logf("B got the lock (fencing token %d) while A's (fencing token %d) was valid for %v more: two holders",
			b.num(t, "fencing_token"), a.num(t, "fencing_token"), time.Until(aEnd).Round(time.Millisecond))
	})

	t.Run("QuarantineOn", func(t *testing.T) {
		a, b, aEnd, gw := run(t, on, "on")
		if b.Status == http.StatusCreated {
			t.Fatalf("B got the lock while A's was valid for %v more: %s", time.Until(aEnd), b.Body)
		}
		// r0 votes for B, r2 holds A's lock, r1 is quarantined: no answer.
		wantProblem(t, b, http.StatusServiceUnavailable, "quorum-unavailable")
		r := gw.do(t, http.MethodGet, "/readyz", "")
		wantStatus(t, r, http.StatusOK)
		list, _ := r.JSON["nodes"].([]any)
		if q := list[1].(map[string]any)["quarantined_until"]; q == nil {
			t.Errorf("/readyz does not show r1 quarantined: %s", r.Body)
		}

		// B waits: it gets the lock only after A's validity.
		w := acquire(t, gw, a.str(t, "resource"), `{"wait_ms":10000}`)
		wantStatus(t, w, http.StatusCreated)
		if now := time.Now(); now.Before(aEnd) {
			t.Errorf("B got the lock %v before A's validity ended", aEnd.Sub(now))
		}
		t.Logf("A's fencing token %d, B's (after waiting) %d", a.num(t, "fencing_token"), w.num(t, "fencing_token"))
	})
}
