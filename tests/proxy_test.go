package tests

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/redlockd/redlockd/internal/proxytest"
)

// Network faults between the gateway and its nodes, through one toxiproxy
// proxy per node, in a toxiproxy-server process per test (internal/proxytest
// says why): latency, bandwidth, cut connections and blackholes are toxics
// on a proxy's connections.

// The proxy tests' node timeout is the fault tests' nodeTimeout, and each
// latency below is a multiple of it.

// proxyTimeout is the node timeout of the safety soaks' gateways
// (checker_test.go), whose fault schedules derive their latencies from it.
const proxyTimeout = 100 * time.Millisecond

// toxiproxyServer builds toxiproxy-server once, next to the redlockd binary.
var toxiproxyServer = sync.OnceValues(func() (string, error) {
	out := filepath.Join(binDir, "toxiproxy-server")
	return out, proxytest.Build(context.Background(), "..", out)
})

// faultProxy is a toxiproxy proxy in front of one node. Each fault is a
// toxic, named after its kind and direction.
type faultProxy struct {
	*toxiproxy.Proxy
	t testing.TB

	mu     sync.Mutex
	toxics map[string]bool // the toxics it has: only the test sets them
}

// startProxies puts a fault proxy on a free port of 127.0.0.1 in front of
// each node, in a toxiproxy-server process killed by PID at cleanup.
func startProxies(t testing.TB, nodes []*RedisNode) []*faultProxy {
	t.Helper()
	bin, err := toxiproxyServer()
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	s, err := proxytest.Launch(bin, t.TempDir(), addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	ps := make([]*faultProxy, len(nodes))
	for i, p := range s.Proxies {
		ps[i] = &faultProxy{Proxy: p, t: t, toxics: map[string]bool{}}
	}
	return ps
}

// Addr is the proxy's host:port.
func (p *faultProxy) Addr() string { return p.Listen }

// SetLatency delays each direction by d (a round trip by 2d).
func (p *faultProxy) SetLatency(d time.Duration) { p.SetLatencies(d, d) }

// SetLatencies delays data to the node by up and data from it by down, each
// chunk from when the proxy read it (0: no delay).
func (p *faultProxy) SetLatencies(up, down time.Duration) {
	p.set("latency_up", "latency", "upstream", "latency", up.Milliseconds())
	p.set("latency_down", "latency", "downstream", "latency", down.Milliseconds())
}

// SetBandwidth limits each direction of each connection to kbPerSecond
// (0: unlimited).
func (p *faultProxy) SetBandwidth(kbPerSecond int) {
	p.set("bandwidth_up", "bandwidth", "upstream", "rate", int64(kbPerSecond))
	p.set("bandwidth_down", "bandwidth", "downstream", "rate", int64(kbPerSecond))
}

// Cut resets connections, open and new ones alike, as soon as the gateway
// sends on them, until Restore.
func (p *faultProxy) Cut() { p.set("cut", "reset_peer", "upstream", "timeout", 0) }

// Blackhole holds the data in both directions, on open and new connections
// alike, until Restore: connections stay open and nothing comes through, as
// across a partition while TCP retransmits, and the held data flows on
// Restore. It is a latency beyond any test: toxiproxy's timeout toxic would
// drop the data instead, and close the connections when removed.
func (p *faultProxy) Blackhole() {
	p.set("blackhole_up", "latency", "upstream", "latency", time.Hour.Milliseconds())
	p.set("blackhole_down", "latency", "downstream", "latency", time.Hour.Milliseconds())
}

// Restore ends Cut and Blackhole. Latency and bandwidth stay as set.
func (p *faultProxy) Restore() {
	for _, name := range []string{"cut", "blackhole_up", "blackhole_down"} {
		p.remove(name)
	}
}

// set replaces the toxic name by one of kind typ on stream with attribute
// attr = v, or removes it if v is 0 (the cut, whose v is 0, excepted).
func (p *faultProxy) set(name, typ, stream, attr string, v int64) {
	p.t.Helper()
	p.remove(name)
	if v == 0 && typ != "reset_peer" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.AddToxic(name, typ, stream, 1, toxiproxy.Attributes{attr: v}); err != nil {
		p.t.Fatalf("proxy %s: toxic %s: %v", p.Addr(), name, err)
	}
	p.toxics[name] = true
}

// remove removes the toxic name if it is there. toxiproxy can deadlock
// removing a toxic while a link fails to write held data to a connection
// the gateway closed on a timeout (Shopify/toxiproxy#558): the client's
// timeout (30s) then fails the test with the cause instead of hanging until
// the suite's timeout.
func (p *faultProxy) remove(name string) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.toxics[name] {
		return
	}
	if err := p.RemoveToxic(name); err != nil {
		p.t.Fatalf("proxy %s: remove toxic %s: %v (a timeout: toxiproxy's deadlock with a link to a closed connection, Shopify/toxiproxy#558)", p.Addr(), name, err)
	}
	delete(p.toxics, name)
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

func proxyAddrs(ps []*faultProxy) []string {
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

// TestProxyFaults: network faults between the gateway and a minority of
// nodes (latency below and above the node timeout, thin bandwidth, cut
// connections, a silent partition) cost a request nothing and never give a
// wrong answer; on a majority every call is 503 quorum-unavailable within
// about the node timeout, and the locks are intact once the fault heals
// (docs/safety.md "What happens in each fault"). One 5-node cluster behind
// fault proxies and one gateway; each subtest injects its faults and
// removes them at its end.
func TestProxyFaults(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	ps := startProxies(t, nodes)
	gw := startGatewayAt(t, proxyAddrs(ps), "--node-timeout", nodeTimeout.String())
	gw.waitReady(t)
	heal := func() {
		for _, p := range ps {
			p.Restore()
			p.SetLatency(0)
			p.SetBandwidth(0)
		}
	}
	// allFive waits until /readyz shows every node up again after a fault.
	allFive := func(t *testing.T) {
		t.Helper()
		eventually(t, 5*time.Second, "/readyz shows all 5 nodes up", func() bool {
			return countUp(gw.do(t, http.MethodGet, "/readyz", "")) == 5
		})
	}

	t.Run("LatencyBelowTimeout", func(t *testing.T) {
		defer heal()
		slow := nodeTimeout * 4 / 10 // each way: a round trip of 0.8 node timeouts
		ps[0].SetLatency(slow)
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":5000}`)
		// The round is decided by the fast quorum: the slow node costs no
		// validity, and still gets the lock.
		if v := a.num(t, "validity_ms"); v <= 5000-50-2-2*slow.Milliseconds() {
			t.Errorf("validity_ms %d, want > ttl - drift - the slow node's %v round trip", v, 2*slow)
		}
		waitHolders(t, nodes, res, a.str(t, "token"), 5)
		// The health loop measures the node's latency.
		eventually(t, 5*time.Second, "/readyz shows the slow node's latency", func() bool {
			m := readyNode(t, gw.do(t, http.MethodGet, "/readyz", ""), ps[0].Addr())
			ms, _ := m["latency_ms"].(interface{ Float64() (float64, error) })
			f, _ := ms.Float64()
			return f >= float64(slow.Milliseconds())
		})
		wantStatus(t, release(t, gw, res, a.str(t, "token")), http.StatusNoContent)
	})

	t.Run("LatencyAboveTimeout", func(t *testing.T) {
		defer heal()
		ps[1].SetLatency(nodeTimeout * 3 / 2)
		ps[3].SetLatencies(0, 3*nodeTimeout) // only the answers are late
		res := resourceName(t)
		a := acquire(t, gw, res, `{"ttl_ms":5000}`)
		wantStatus(t, a, http.StatusCreated)
		wantWithin(t, a, fastEnough)
		wantCount(t, a, "locked_nodes", 3, 3) // the slow nodes answer after the decision
		// The round did not wait for the slow nodes, nor for the timeout.
		if v := a.num(t, "validity_ms"); v <= 5000-50-2-nodeTimeout.Milliseconds() {
			t.Errorf("validity_ms %d, want > ttl - drift - node timeout", v)
		}
		tok := a.str(t, "token")
		b := acquire(t, gw, res, "")
		wantProblem(t, b, http.StatusConflict, "lock-held")
		wantWithin(t, b, fastEnough)
		e := extend(t, gw, res, tok, `{"ttl_ms":5000}`)
		wantStatus(t, e, http.StatusOK)
		wantWithin(t, e, fastEnough)
		d := release(t, gw, res, tok)
		wantStatus(t, d, http.StatusNoContent)
		wantWithin(t, d, fastEnough)
	})

	t.Run("LatencyOnMajority", func(t *testing.T) {
		defer heal()
		for _, i := range []int{0, 2, 4} {
			ps[i].SetLatency(2 * nodeTimeout)
		}
		res := resourceName(t)
		a := acquire(t, gw, res, `{"ttl_ms":1000}`)
		wantProblem(t, a, http.StatusServiceUnavailable, "quorum-unavailable")
		wantWithin(t, a, fastEnough)
		heal()
		// The late SETs of the failed attempt still land (the undo could not
		// reach the slow nodes in time): the resource looks held by nobody's
		// token until they expire, one TTL at most.
		eventually(t, 10*time.Second, "the resource can be locked once the latency is gone", func() bool {
			return acquire(t, gw, res, `{"ttl_ms":1000}`).Status == http.StatusCreated
		})
	})

	t.Run("Bandwidth", func(t *testing.T) {
		defer heal()
		// 1 MB/s: no effect on small commands. With nodes 0 and 1 cut off,
		// node 2's vote decides: a node slower than the timeout never
		// counts, so a 201 shows it answers in time.
		ps[2].SetBandwidth(1000)
		ps[0].Cut()
		ps[1].Cut()
		eventually(t, 5*time.Second, "a lock decided by node 2 at 1 MB/s", func() bool {
			res := resourceName(t)
			a := acquire(t, gw, res, `{"ttl_ms":5000}`)
			if a.Status != http.StatusCreated {
				return false
			}
			wantStatus(t, release(t, gw, res, a.str(t, "token")), http.StatusNoContent)
			return true
		})
		heal()
		allFive(t)
		// 1 KB/s: a command of 150 bytes or more takes 150 ms or more,
		// far behind the quorum.
		ps[2].SetBandwidth(1)
		ps[4].SetBandwidth(1)
		res := resourceName(t)
		a := acquire(t, gw, res, `{"ttl_ms":5000}`)
		wantStatus(t, a, http.StatusCreated)
		wantWithin(t, a, fastEnough)
		wantCount(t, a, "locked_nodes", 3, 3)
		d := release(t, gw, res, a.str(t, "token"))
		wantStatus(t, d, http.StatusNoContent)
		wantWithin(t, d, fastEnough)
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
		wantWithin(t, e, fastEnough)
		if got := e.num(t, "locked_nodes"); got != 3 {
			t.Errorf("extend locked_nodes %d with two nodes cut off, want 3", got)
		}
		b := acquire(t, gw, res, "")
		wantProblem(t, b, http.StatusConflict, "lock-held")
		wantWithin(t, b, fastEnough)
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
		allFive(t)
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	})

	t.Run("CutMajority", func(t *testing.T) {
		defer heal()
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":10000}`).str(t, "token")
		// The lock must outlive the release below on the live nodes 0, 4.
		waitHolders(t, nodes, res, tok, 5)
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
			wantWithin(t, r, fastEnough)
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
			wantWithin(t, e, fastEnough)
			b := acquire(t, gw, res, "")
			wantProblem(t, b, http.StatusConflict, "lock-held")
			wantWithin(t, b, fastEnough)
			i := inspect(t, gw, res)
			wantStatus(t, i, http.StatusOK)
			wantWithin(t, i, fastEnough)
		}
		ps[2].Blackhole() // now a majority
		e := extend(t, gw, res, tok, `{"ttl_ms":10000}`)
		wantProblem(t, e, http.StatusServiceUnavailable, "quorum-unavailable")
		wantWithin(t, e, fastEnough)
		b := acquire(t, gw, res, "")
		wantProblem(t, b, http.StatusServiceUnavailable, "quorum-unavailable")
		wantWithin(t, b, fastEnough)
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
