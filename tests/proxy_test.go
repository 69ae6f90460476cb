package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/faultproxy"
)

// Network faults between the gateway and its nodes, through one fault proxy
// per node (internal/faultproxy: latency, bandwidth, cut, blackhole).

// proxyTimeout is the gateway's node timeout in the proxy tests, and
// proxyFast the bound on any request while faults are on: the node timeout
// plus a margin for a loaded 2-core machine.
const (
	proxyTimeout = 100 * time.Millisecond
	proxyFast    = proxyTimeout + 700*time.Millisecond
)

// startProxies puts a fault proxy in front of each node, closed at cleanup.
func startProxies(t testing.TB, nodes []*RedisNode) []*faultproxy.Proxy {
	t.Helper()
	ps := make([]*faultproxy.Proxy, len(nodes))
	for i, n := range nodes {
		p, err := faultproxy.Start(n.Addr)
		if err != nil {
			t.Fatalf("proxy for node %d: %v", i, err)
		}
		t.Cleanup(func() { _ = p.Close() })
		ps[i] = p
	}
	return ps
}

// startGatewayAt runs `redlockd serve` against the Redis nodes at addrs
// (host:port, e.g. proxies), with restart quarantine off and extraFlags
// appended (later flags win). It does not wait for /readyz.
func startGatewayAt(t testing.TB, addrs []string, extraFlags ...string) *Gateway {
	t.Helper()
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = "redis://" + a
	}
	return startServe(t, urls, extraFlags...)
}

func proxyAddrs(ps []*faultproxy.Proxy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Addr()
	}
	return out
}

// readyNode returns the /readyz entry of the node at addr.
func readyNode(t testing.TB, r *Resp, addr string) map[string]any {
	t.Helper()
	list, _ := r.JSON["nodes"].([]any)
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["addr"] == addr {
			return m
		}
	}
	t.Fatalf("/readyz has no node %s: %s", addr, r.Body)
	return nil
}

// wantWithin fails if r took longer than limit.
func wantWithin(t testing.TB, r *Resp, limit time.Duration) {
	t.Helper()
	if r.Elapsed > limit {
		t.Errorf("%s %s → %d took %v, want < %v", r.Method, r.Path, r.Status, r.Elapsed, limit)
	}
}

// TestProxyFaults runs one 5-node cluster behind fault proxies and one
// gateway; each subtest injects network faults between the gateway and some
// nodes and removes them at its end.
func TestProxyFaults(t *testing.T) {
	nodes := startCluster(t, 5)
	ps := startProxies(t, nodes)
	gw := startGatewayAt(t, proxyAddrs(ps), "--node-timeout", proxyTimeout.String())
	gw.waitReady(t)
	heal := func() {
		for _, p := range ps {
			p.Restore()
			p.SetLatency(0)
			p.SetBandwidth(0)
		}
	}
	// allFive waits until every node votes again after a fault.
	allFive := func(t *testing.T) {
		t.Helper()
		eventually(t, 5*time.Second, "all 5 nodes vote again", func() bool {
			res := resourceName(t)
			a := lock(t, gw, res, `{"ttl_ms":1000}`)
			release(t, gw, res, a.str(t, "token"))
			return a.num(t, "locked_nodes") == 5
		})
	}

	t.Run("LatencyBelowTimeout", func(t *testing.T) {
		defer heal()
		ps[0].SetLatency(15 * time.Millisecond) // 30 ms round trip < 100 ms timeout
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":5000}`)
		if got := a.num(t, "locked_nodes"); got != 5 {
			t.Errorf("locked_nodes %d with a slow-but-in-time node, want 5", got)
		}
		// The gateway waited for the slow node: validity reflects it.
		if v := a.num(t, "validity_ms"); v > 5000-50-30 {
			t.Errorf("validity_ms %d, want ≤ ttl - drift - 30 ms round trip", v)
		}
		// The health loop measures the node's latency.
		eventually(t, 5*time.Second, "/readyz shows the slow node's latency", func() bool {
			m := readyNode(t, gw.do(t, http.MethodGet, "/readyz", ""), ps[0].Addr())
			ms, _ := m["latency_ms"].(interface{ Float64() (float64, error) })
			f, _ := ms.Float64()
			return f >= 30
		})
		wantStatus(t, release(t, gw, res, a.str(t, "token")), http.StatusNoContent)
	})

	t.Run("LatencyAboveTimeout", func(t *testing.T) {
		defer heal()
		ps[1].SetLatency(150 * time.Millisecond)
		ps[3].SetLatencies(0, 300*time.Millisecond) // only the answers are late
		res := resourceName(t)
		a := acquire(t, gw, res, `{"ttl_ms":5000}`)
		wantStatus(t, a, http.StatusCreated)
		wantWithin(t, a, proxyFast)
		if got := a.num(t, "locked_nodes"); got != 3 {
			t.Errorf("locked_nodes %d with two nodes slower than the timeout, want 3", got)
		}
		// Elapsed time runs to the timeout of the slowest node considered.
		if v := a.num(t, "validity_ms"); v > 5000-50-2-proxyTimeout.Milliseconds() {
			t.Errorf("validity_ms %d, want ≤ ttl - drift - node timeout", v)
		}
		tok := a.str(t, "token")
		b := acquire(t, gw, res, "")
		wantProblem(t, b, http.StatusConflict, "lock-held")
		wantWithin(t, b, proxyFast)
		e := extend(t, gw, res, tok, `{"ttl_ms":5000}`)
		wantStatus(t, e, http.StatusOK)
		wantWithin(t, e, proxyFast)
		d := release(t, gw, res, tok)
		wantStatus(t, d, http.StatusNoContent)
		wantWithin(t, d, proxyFast)
	})

	t.Run("LatencyOnMajority", func(t *testing.T) {
		defer heal()
		for _, i := range []int{0, 2, 4} {
			ps[i].SetLatency(200 * time.Millisecond)
		}
		res := resourceName(t)
		a := acquire(t, gw, res, `{"ttl_ms":1000}`)
		wantProblem(t, a, http.StatusServiceUnavailable, "quorum-unavailable")
		wantWithin(t, a, proxyFast)
		heal()
		// The late SETs of the failed attempt still land (the undo could not
		// reach the slow nodes in time): the resource looks held by nobody's
		// token until they expire, one TTL at most.
		eventually(t, 5*time.Second, "the resource can be locked once the latency is gone", func() bool {
			return acquire(t, gw, res, `{"ttl_ms":1000}`).Status == http.StatusCreated
		})
	})

	t.Run("Bandwidth", func(t *testing.T) {
		defer heal()
		ps[2].SetBandwidth(1 << 20) // 1 MiB/s: no effect on small commands
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":5000}`)
		if got := a.num(t, "locked_nodes"); got != 5 {
			t.Errorf("locked_nodes %d at 1 MiB/s, want 5", got)
		}
		wantStatus(t, release(t, gw, res, a.str(t, "token")), http.StatusNoContent)
		// 500 B/s: a ~150-byte EVALSHA takes ~300 ms, beyond the timeout.
		ps[2].SetBandwidth(500)
		ps[4].SetBandwidth(500)
		res = resourceName(t)
		a = acquire(t, gw, res, `{"ttl_ms":5000}`)
		wantStatus(t, a, http.StatusCreated)
		wantWithin(t, a, proxyFast)
		if got := a.num(t, "locked_nodes"); got != 3 {
			t.Errorf("locked_nodes %d with two nodes at 500 B/s, want 3", got)
		}
		d := release(t, gw, res, a.str(t, "token"))
		wantStatus(t, d, http.StatusNoContent)
		wantWithin(t, d, proxyFast)
		heal()
		allFive(t)
	})

	t.Run("CutMinority", func(t *testing.T) {
		defer heal()
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":10000}`).str(t, "token")
		ps[0].Cut()
		ps[1].Cut()
		e := extend(t, gw, res, tok, `{"ttl_ms":10000}`)
		wantStatus(t, e, http.StatusOK)
		wantWithin(t, e, proxyFast)
		if got := e.num(t, "locked_nodes"); got != 3 {
			t.Errorf("extend locked_nodes %d with two nodes cut off, want 3", got)
		}
		b := acquire(t, gw, res, "")
		wantProblem(t, b, http.StatusConflict, "lock-held")
		wantWithin(t, b, proxyFast)
		eventually(t, 5*time.Second, "/readyz shows the cut nodes down", func() bool {
			r := gw.do(t, http.MethodGet, "/readyz", "")
			return r.Status == http.StatusOK && countUp(r) == 3
		})
		for _, i := range []int{0, 1} {
			m := readyNode(t, gw.do(t, http.MethodGet, "/readyz", ""), ps[i].Addr())
			if m["up"] != false {
				t.Errorf("cut node %d: %v", i, m)
			}
		}
		heal()
		eventually(t, 5*time.Second, "/readyz shows all nodes up again", func() bool {
			return countUp(gw.do(t, http.MethodGet, "/readyz", "")) == 5
		})
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	})

	t.Run("CutMajority", func(t *testing.T) {
		defer heal()
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":10000}`).str(t, "token")
		for _, i := range []int{1, 2, 3} {
			ps[i].Cut()
		}
		for _, r := range []*Resp{
			acquire(t, gw, resourceName(t), ""),
			acquire(t, gw, res, ""),
			extend(t, gw, res, tok, `{"ttl_ms":10000}`),
			release(t, gw, res, tok),
			inspect(t, gw, res),
		} {
			wantProblem(t, r, http.StatusServiceUnavailable, "quorum-unavailable")
			wantWithin(t, r, proxyFast)
		}
		eventually(t, 5*time.Second, "/readyz unready", func() bool {
			return gw.do(t, http.MethodGet, "/readyz", "").Status == http.StatusServiceUnavailable
		})
		heal()
		// The nodes were never restarted: the lock is intact.
		var e *Resp
		eventually(t, 5*time.Second, "extend once the cut is healed", func() bool {
			e = extend(t, gw, res, tok, `{"ttl_ms":10000}`)
			return e.Status != http.StatusServiceUnavailable
		})
		wantStatus(t, e, http.StatusOK)
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	})

	t.Run("Blackhole", func(t *testing.T) {
		defer heal()
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":10000}`)
		tok, fence := a.str(t, "token"), a.num(t, "fencing_token")
		// A partition: connections stay open, nothing comes back.
		ps[3].Blackhole()
		ps[4].Blackhole()
		for range 3 {
			e := extend(t, gw, res, tok, `{"ttl_ms":10000}`)
			wantStatus(t, e, http.StatusOK)
			wantWithin(t, e, proxyFast)
			b := acquire(t, gw, res, "")
			wantProblem(t, b, http.StatusConflict, "lock-held")
			wantWithin(t, b, proxyFast)
			i := inspect(t, gw, res)
			wantStatus(t, i, http.StatusOK)
			wantWithin(t, i, proxyFast)
		}
		ps[2].Blackhole() // now a majority
		e := extend(t, gw, res, tok, `{"ttl_ms":10000}`)
		wantProblem(t, e, http.StatusServiceUnavailable, "quorum-unavailable")
		wantWithin(t, e, proxyFast)
		b := acquire(t, gw, res, "")
		wantProblem(t, b, http.StatusServiceUnavailable, "quorum-unavailable")
		wantWithin(t, b, proxyFast)
		heal()
		eventually(t, 5*time.Second, "extend once the partition heals", func() bool {
			e = extend(t, gw, res, tok, `{"ttl_ms":10000}`)
			return e.Status != http.StatusServiceUnavailable
		})
		wantStatus(t, e, http.StatusOK)
		if got := e.num(t, "fencing_token"); got != fence {
			t.Errorf("fencing_token changed by extend: %d → %d", fence, got)
		}
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
		allFive(t)
	})
}
