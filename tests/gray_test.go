package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// Gray failures (docs/safety.md "What happens in each fault", the README:
// "a paused or slow minority of nodes costs no request any time"): with up
// to N − quorum nodes paused or slow, every round is decided by the nodes
// that answer, so requests answer in the time of the quorum-th fastest node,
// not the node timeout, and their results are those of a healthy cluster.

// grayTimeout is the gateway's node timeout in these tests: long, so that a
// request that waited for a paused or slow node is told from one that did
// not by far more than a loaded machine's noise; grayFast bounds a request
// that must not wait for it.
const (
	grayTimeout = 3 * time.Second
	grayFast    = grayTimeout / 3
)

// grayCycles runs lock cycles on one resource through gw and checks every
// answer and that none waited for a slow node: acquire (201, a fencing token
// above the last), a second acquire (409 lock-held), extend (200, same
// fence), inspect (held, same fence), a release with a stranger's token
// (409), a waiting acquire, release (204) and its retry (204), and the
// waiter handed the lock at once (201, a greater fencing token).
func grayCycles(t *testing.T, gw *Gateway, what string) {
	t.Helper()
	res := resourceName(t)
	var last int64
	for i := range 3 {
		var rs []*Resp
		a := acquire(t, gw, res, `{"ttl_ms":30000}`)
		rs = append(rs, a)
		wantStatus(t, a, http.StatusCreated)
		tok, fence := a.str(t, "token"), a.num(t, "fencing_token")
		if fence <= last {
			t.Errorf("%s, cycle %d: fencing_token %d, want above %d", what, i, fence, last)
		}
		last = fence
		if v := a.num(t, "validity_ms"); v < 29000 {
			t.Errorf("%s: validity_ms %d: the round waited for a slow node", what, v)
		}
		b := acquire(t, gw, res, "")
		rs = append(rs, b)
		wantProblem(t, b, http.StatusConflict, "lock-held")
		e := extend(t, gw, res, tok, `{"ttl_ms":30000}`)
		rs = append(rs, e)
		wantStatus(t, e, http.StatusOK)
		if got := e.num(t, "fencing_token"); got != fence {
			t.Errorf("%s: extend fencing_token %d, want %d", what, got, fence)
		}
		in := inspect(t, gw, res)
		rs = append(rs, in)
		wantStatus(t, in, http.StatusOK)
		if in.JSON["held"] != true || in.num(t, "fencing_token") != fence {
			t.Errorf("%s: inspect %s, want held with fencing_token %d", what, in.Body, fence)
		}
		s := release(t, gw, res, "stranger-token-0123456789abcdef")
		rs = append(rs, s)
		wantProblem(t, s, http.StatusConflict, "not-owner")
		// A waiter is handed the lock as soon as it is released.
		waiter := make(chan *Resp, 1)
		go func() {
			r, err := gw.try(http.MethodPost, "/locks/"+res, fmt.Sprintf(`{"ttl_ms":30000,"wait_ms":%d}`, 2*grayTimeout.Milliseconds()))
			if err != nil {
				r = &Resp{Body: []byte(err.Error())}
			}
			waiter <- r
		}()
		eventually(t, grayFast, "the acquire waits", func() bool { return scrapeMetrics(t, gw).value("redlockd_waiters") == 1 })
		released := time.Now()
		for range 2 { // the second is a retry: 204 again, and the waiter's lock stays
			d := release(t, gw, res, tok)
			rs = append(rs, d)
			wantStatus(t, d, http.StatusNoContent)
		}
		w := <-waiter
		if took := time.Since(released); took > grayFast {
			t.Errorf("%s: the waiter got the lock %v after the release", what, took)
		}
		wantStatus(t, w, http.StatusCreated)
		if f := w.num(t, "fencing_token"); f <= last {
			t.Errorf("%s: the waiter's fencing_token %d, want above %d", what, f, last)
		} else {
			last = f
		}
		rs = append(rs, release(t, gw, res, w.str(t, "token")))
		wantStatus(t, rs[len(rs)-1], http.StatusNoContent)
		for _, r := range rs {
			wantWithin(t, r, grayFast)
		}
	}
}

// TestGrayPaused: 1 and then 2 of 5 nodes SIGSTOPped cost no request the node
// timeout, and every answer is right; once they resume, a lock taken
// meanwhile is on them too (their queued SETs ran) (docs/safety.md
// "What happens in each fault": node paused).
func TestGrayPaused(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes, "--node-timeout", grayTimeout.String())
	grayCycles(t, gw, "healthy") // connections and scripts first
	for paused := 1; paused <= 2; paused++ {
		nodes[5-paused].Pause()
		grayCycles(t, gw, fmt.Sprintf("%d paused", paused))
	}
	res := resourceName(t)
	tok := lock(t, gw, res, `{"ttl_ms":30000}`).str(t, "token")
	nodes[3].Resume()
	nodes[4].Resume()
	eventually(t, 2*grayTimeout, "the SETs queued on the paused nodes ran", func() bool {
		return len(holders(t, nodes, res, tok)) == 5
	})
	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
}

// TestGraySlow: 1 and then 2 of 5 nodes behind a latency just below the node
// timeout, and then above it, cost no request that latency, and every answer
// is right; /readyz shows them slow, and then down (docs/safety.md
// "What happens in each fault": slow).
func TestGraySlow(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	ps := startProxies(t, nodes)
	gw := startGatewayAt(t, proxyAddrs(ps), "--node-timeout", grayTimeout.String())
	gw.waitReady(t)
	grayCycles(t, gw, "healthy")
	for _, c := range []struct {
		name    string
		latency time.Duration // each way
	}{
		{"below the node timeout", grayTimeout * 4 / 10}, // a round trip of 0.8 node timeouts
		{"above the node timeout", grayTimeout},
	} {
		for slow := 1; slow <= 2; slow++ {
			for _, p := range ps[5-slow:] {
				p.SetLatency(c.latency)
			}
			grayCycles(t, gw, fmt.Sprintf("%d slow, %s", slow, c.name))
		}
		// Operators see what requests no longer feel: /readyz shows node 4
		// slow while it answers within the node timeout, down beyond it.
		eventually(t, 4*grayTimeout, "/readyz shows node 4 "+c.name, func() bool {
			n := readyNode(t, gw.do(t, http.MethodGet, "/readyz", ""), ps[4].Addr())
			return n["up"] == (c.latency < grayTimeout/2) && n["slow"] == (c.latency < grayTimeout/2)
		})
		for _, p := range ps {
			p.SetLatency(0)
		}
	}
}

// TestGrayLateUndo: an acquire refused by a quorum while a minority is paused
// answers 409 at once; its SETs queued on the paused nodes run when they
// resume and, as the attempt failed, are undone: the late grants do not keep
// the resource busy for their TTL (docs/design.md
// "Stragglers finish in the background").
func TestGrayLateUndo(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes, "--node-timeout", grayTimeout.String())
	res := resourceName(t)
	tok := lock(t, gw, res, `{"ttl_ms":60000}`).str(t, "token")
	eventually(t, grayTimeout, "the lock on every node", func() bool { return len(holders(t, nodes, res, tok)) == 5 })
	// The lock lives on nodes 0-2 only; nodes 3 and 4, paused, are free.
	ctx := context.Background()
	fence := "redlockd:fence:/" + res
	var before []int64
	for _, n := range nodes[3:] {
		if err := n.Client().Del(ctx, lockKey(res)).Err(); err != nil {
			t.Fatal(err)
		}
		f, err := n.Client().Get(ctx, fence).Int64()
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, f)
		n.Pause()
	}
	b := acquire(t, gw, res, `{"ttl_ms":60000}`)
	wantProblem(t, b, http.StatusConflict, "lock-held")
	wantWithin(t, b, grayFast)
	// Resumed within the node timeout: the queued SETs run (each raises its
	// node's fence counter) and grant, late; then they are undone.
	for _, n := range nodes[3:] {
		n.Resume()
	}
	eventually(t, 2*grayTimeout, "the late grants ran and were undone", func() bool {
		for i, n := range nodes[3:] {
			f, _ := n.Client().Get(ctx, fence).Int64()
			if f <= before[i] || lockHolder(t, n.Client(), lockKey(res)) != "" {
				return false
			}
		}
		return true
	})
	if got := holders(t, nodes, res, tok); len(got) != 3 {
		t.Fatalf("the holder's lock is on nodes %v, want 0-2 (the undo must not touch it)", got)
	}
	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
}

// TestGraySlowReconnect: a node whose round trip is most of the node timeout,
// and whose connections are all dropped, is seen up and slow again by /readyz
// without any request: setting up a new connection (HELLO, a round trip of
// its own) is not counted in the health check's node timeout (docs/safety.md
// "What happens in each fault": the health loop).
func TestGraySlowReconnect(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	nodes := startCluster(t, 5)
	ps := startProxies(t, nodes)
	gw := startGatewayAt(t, proxyAddrs(ps), "--node-timeout", timeout.String())
	gw.waitReady(t)
	slowUp := func() bool {
		n := readyNode(t, gw.do(t, http.MethodGet, "/readyz", ""), ps[4].Addr())
		return n["up"] == true && n["slow"] == true
	}
	ps[4].SetLatency(timeout * 35 / 100) // a round trip of 0.7 node timeouts; two are over it
	eventually(t, 5*timeout, "/readyz shows node 4 slow", slowUp)
	if err := nodes[4].Client().ClientKillByFilter(t.Context(), "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*timeout, "/readyz shows node 4 down", func() bool { return !slowUp() })
	eventually(t, 15*timeout, "/readyz shows node 4 slow again", slowUp)
}
