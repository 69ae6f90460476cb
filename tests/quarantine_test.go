package tests

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// Restart quarantine auto (docs/safety.md "Guarantees and limits, in plain
// words", Restart quarantine): a node whose configuration keeps every
// acknowledged write across a restart (appendonly yes, appendfsync always)
// votes at once after one; another is quarantined for max TTL, and /readyz
// says why for each node.

var (
	durableArgs  = []string{"--appendonly", "yes", "--appendfsync", "always"}
	everysecArgs = []string{"--appendonly", "yes", "--appendfsync", "everysec"}
)

// startNodesWith starts one redis-server per argument list, at once.
func startNodesWith(t *testing.T, args ...[]string) []*RedisNode {
	t.Helper()
	var out []*RedisNode
	for _, a := range args {
		out = append(out, nodesOf(redistest.ClusterWith(t, 1, redistest.Config{Args: a})...)...)
	}
	return out
}

// readyQuarantine returns a node's quarantine reason in /readyz and whether
// it is quarantined.
func readyQuarantine(t *testing.T, gw *Gateway, n *RedisNode) (string, bool) {
	t.Helper()
	m := readyNode(t, gw.do(t, http.MethodGet, "/readyz", ""), n.Addr)
	why, _ := m["quarantine"].(string)
	return why, m["quarantined_until"] != nil
}

// TestQuarantineAutoDurableNodesVoteAtOnce: under --restart-quarantine auto,
// a node that keeps every acknowledged write (appendonly yes, appendfsync
// always) votes at once after a restart, with its lock keys and fence
// counters; a node that does not, one that refuses CONFIG, and one switched
// to everysec at runtime before its restart are quarantined, and /readyz
// says why for each (docs/safety.md "Guarantees and limits, in plain
// words", Restart quarantine).
func TestQuarantineAutoDurableNodesVoteAtOnce(t *testing.T) {
	t.Parallel()
	renamed := append(append([]string{}, durableArgs...), "--rename-command", "CONFIG", "")
	nodes := startNodesWith(t, durableArgs, durableArgs, durableArgs, everysecArgs, renamed)
	// The nodes just started: only the durable ones vote, a quorum.
	gw := startGateway(t, nodes, "--restart-quarantine", "auto", "--node-timeout", nodeTimeout.String())
	for i, want := range []string{"durable: appendonly yes, appendfsync always", "durable: appendonly yes, appendfsync always",
		"durable: appendonly yes, appendfsync always", "not durable (appendonly yes, appendfsync everysec)", "CONFIG GET refused"} {
		why, q := readyQuarantine(t, gw, nodes[i])
		if !strings.Contains(why, want) || q != (i >= 3) {
			t.Errorf("node %d: quarantine %q, quarantined %v; want %q, quarantined %v", i, why, q, want, i >= 3)
		}
	}

	res := resourceName(t)
	held := acquire(t, gw, res, `{"ttl_ms": 30000}`)
	wantStatus(t, held, http.StatusCreated)
	token, fence := held.str(t, "token"), held.num(t, "fencing_token")

	for _, n := range nodes[:3] {
		n.Restart()
	}
	restarted := time.Now()
	eventually(t, 10*time.Second, "a lock with 3 of 5 nodes just restarted", func() bool {
		return acquire(t, gw, resourceName(t)+"-after", "").Status == http.StatusCreated
	})
	if el := time.Since(restarted); el > 20*time.Second {
		t.Errorf("first lock %v after the restarts: durable nodes should vote at once, not after max TTL", el)
	}
	for i, n := range nodes[:3] {
		if why, q := readyQuarantine(t, gw, n); q || !strings.HasPrefix(why, "durable:") {
			t.Errorf("restarted durable node %d: quarantine %q, quarantined %v; want it voting", i, why, q)
		}
	}
	// The lock and its fence survived the restarts of the nodes that hold it.
	if got := holders(t, nodes[:3], res, token); len(got) != 3 {
		t.Errorf("lock key on restarted nodes %v, want all 3", got)
	}
	for i, n := range nodes[:3] {
		if v, err := n.Client().Get(context.Background(), "redlockd:fence:/"+res).Int64(); err != nil || v != fence {
			t.Errorf("node %d: fence counter %d, %v after its restart; want %d", i, v, err, fence)
		}
	}
	wantProblem(t, acquire(t, gw, res, ""), http.StatusConflict, "lock-held")
	ext := extend(t, gw, res, token, `{"ttl_ms": 30000}`)
	wantStatus(t, ext, http.StatusOK)
	if got := ext.num(t, "fencing_token"); got != fence {
		t.Errorf("fence after the restarts %d, want %d", got, fence)
	}

	// A node that does not fsync every write is quarantined after its restart.
	nodes[3].Restart()
	eventually(t, 10*time.Second, "the everysec node quarantined after its restart", func() bool {
		why, q := readyQuarantine(t, gw, nodes[3])
		return q && strings.HasPrefix(why, "restarted") && strings.Contains(why, "appendfsync everysec")
	})

	// A node set to everysec at runtime lost writes in its crash, whatever
	// the new process's settings: quarantined.
	if err := nodes[0].Client().ConfigSet(context.Background(), "appendfsync", "everysec").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the health check sees the runtime change", func() bool {
		why, _ := readyQuarantine(t, gw, nodes[0])
		return strings.Contains(why, "everysec")
	})
	nodes[0].Restart()
	eventually(t, 10*time.Second, "the node not durable before its restart quarantined", func() bool {
		why, q := readyQuarantine(t, gw, nodes[0])
		return q && strings.Contains(why, "the process before it was not durable")
	})
}

// retryAfterMs returns the retry_after_ms of a problem.
func retryAfterMs(t *testing.T, r *Resp) time.Duration {
	t.Helper()
	return time.Duration(r.num(t, "retry_after_ms")) * time.Millisecond
}

// quorumVotesIn reads /readyz: how long until a quorum of nodes votes
// again, the quorum-th smallest wait of a node (0 for one that votes).
func quorumVotesIn(t *testing.T, gw *Gateway) time.Duration {
	t.Helper()
	r := gw.do(t, http.MethodGet, "/readyz", "")
	now := time.Now()
	list, _ := r.JSON["nodes"].([]any)
	var waits []time.Duration
	for _, e := range list {
		m, _ := e.(map[string]any)
		var w time.Duration
		if q, ok := m["quarantined_until"].(string); ok {
			until, err := time.Parse(time.RFC3339Nano, q)
			if err != nil {
				t.Fatal(err)
			}
			w = until.Sub(now)
		}
		waits = append(waits, w)
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	return waits[r.num(t, "quorum")-1]
}

// wantQuarantineProblem checks a 503 during a quarantine: the detail counts
// the quarantined nodes, says "not granted" (none can have granted), and
// Retry-After is about when a quorum votes again (plus 1–1.2 s).
func wantQuarantineProblem(t *testing.T, gw *Gateway, r *Resp, quarantined string) {
	t.Helper()
	wantProblem(t, r, http.StatusServiceUnavailable, "quorum-unavailable")
	d := r.str(t, "detail")
	if !strings.Contains(d, quarantined+" in quarantine") || !strings.Contains(d, "not granted") || strings.Contains(d, "unknown") {
		t.Errorf("detail %q, want %q in quarantine and not granted", d, quarantined)
	}
	want, got := quorumVotesIn(t, gw)+time.Second, retryAfterMs(t, r)
	if got < want-2*time.Second || got > want+2*time.Second {
		t.Errorf("retry_after_ms %v, want about %v (a quorum votes again then)", got, want)
	}
	if s := retryAfter(t, r); time.Duration(s)*time.Second < got {
		t.Errorf("Retry-After %ds below retry_after_ms %v", s, got)
	}
}

// TestQuarantineOnQuarantinesDurableNodes: with --restart-quarantine on,
// even durable nodes just started are quarantined (docs/safety.md
// "Guarantees and limits, in plain words", Restart quarantine); an acquire
// is 503 "not granted" until the quorum-th quarantine ends, which
// Retry-After says (docs/safety.md "What is guaranteed").
func TestQuarantineOnQuarantinesDurableNodes(t *testing.T) {
	t.Parallel()
	nodes := startNodesWith(t, durableArgs, durableArgs, durableArgs, durableArgs, durableArgs)
	gw := startUnready(t, nodes, "--restart-quarantine", "on", "--node-timeout", nodeTimeout.String())
	for i, n := range nodes {
		why, q := readyQuarantine(t, gw, n)
		if !q || !strings.Contains(why, "quarantine on") {
			t.Errorf("node %d: quarantine %q, quarantined %v; want quarantined (on)", i, why, q)
		}
	}
	r := acquire(t, gw, resourceName(t), "")
	wantQuarantineProblem(t, gw, r, "5")
	if got := retryAfterMs(t, r); got < 30*time.Second {
		t.Errorf("retry_after_ms %v while every node is quarantined for about max TTL (60s)", got)
	}
}

// TestQuarantineRestartOfThreeTellsWhenAQuorumVotes: while 3 of 5 nodes are
// quarantined after a restart, acquires are 503 "not granted", counting 3
// in quarantine, with Retry-After at the end of their quarantine, when a
// quorum votes again (docs/safety.md "What is guaranteed"; openapi.yaml
// "Behaviour where the specification is silent").
func TestQuarantineRestartOfThreeTellsWhenAQuorumVotes(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	gw := startUnready(t, nodes, "--restart-quarantine", "on", "--default-ttl", "1s", "--max-ttl", "6s",
		"--node-timeout", nodeTimeout.String())
	eventually(t, 20*time.Second, "the fresh nodes' quarantine over", func() bool {
		return gw.do(t, http.MethodGet, "/readyz", "").Status == http.StatusOK
	})
	for _, n := range nodes[:3] {
		n.Restart()
	}
	var r *Resp
	eventually(t, 5*time.Second, "an acquire refused for the quarantine", func() bool {
		r = acquire(t, gw, resourceName(t), "")
		d, _ := r.JSON["detail"].(string)
		return r.Status == http.StatusServiceUnavailable && strings.Contains(d, "3 in quarantine")
	})
	wantQuarantineProblem(t, gw, r, "3")
	if got := retryAfterMs(t, r); got < 3*time.Second {
		t.Errorf("retry_after_ms %v; the quarantine lasts about max TTL (6s) from the restarts", got)
	}
}

// allVoting waits until no node is quarantined: under --restart-quarantine
// on, nodes started just now are quarantined until they have been up for
// maxTTL (their uptime is all the gateway knows), and /readyz is ready as
// soon as a quorum of them is out, whose uptimes differ on a loaded machine.
func allVoting(t *testing.T, gw *Gateway, nodes []*RedisNode, maxTTL time.Duration) {
	t.Helper()
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
}

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

// TestQuarantineRestartedNodes: a node restarted while a lock is held, empty
// after a crash or after a clean SHUTDOWN with its data on disk, is
// quarantined (/readyz and redlockd_node_quarantined), does not count in
// locked_nodes or held_nodes, gets the lock put back by extend and removed
// by release, and votes again once max TTL is over (docs/safety.md "What
// happens in each fault", Node restarted empty; docs/operations.md
// "Restarts").
func TestQuarantineRestartedNodes(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	// Long enough for the checks below on a loaded machine, which must end
	// before the quarantine does.
	const maxTTL = 6 * time.Second
	nodes := append(startCluster(t, 4), nodesOf(redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always"))...)
	gw := startUnready(t, nodes, "--restart-quarantine", "on", "--default-ttl", maxTTL.String(), "--max-ttl", maxTTL.String())
	gw.waitReady(t)
	allVoting(t, gw, nodes, maxTTL)
	res := resourceName(t)
	tok := lock(t, gw, res, `{"ttl_ms":6000}`).str(t, "token")
	waitHolders(t, nodes, res, tok, 5)

	nodes[0].Restart()
	_ = nodes[4].Client().Do(context.Background(), "SHUTDOWN").Err() // the connection closes: no reply
	nodes[4].Restart()
	restarted := time.Now()
	if got := holders(t, nodes, res, tok); len(got) != 4 || got[3] != 4 {
		t.Fatalf("after the restarts the token is on %v, want every node but the empty one", got)
	}
	// A new connection to a restarted node finds it restarted (its uptime)
	// and quarantines it: the first request after the restarts may still
	// meet a pooled connection the restart closed (EOF), and the next one,
	// or the health check, reconnects. Quarantined nodes answer but do not
	// vote. The releases load release.lua on them (their script caches are
	// empty), so that the release checked below needs no EVAL fallback.
	eventually(t, 5*time.Second, "both restarted nodes quarantined", func() bool {
		other := resourceName(t) + "-other"
		l := lock(t, gw, other, "")
		wantCount(t, l, "locked_nodes", 3, 3)
		wantStatus(t, release(t, gw, other, l.str(t, "token")), http.StatusNoContent)
		r := gw.do(t, http.MethodGet, "/readyz", "")
		return readyNode(t, r, nodes[0].Addr)["quarantined_until"] != nil && readyNode(t, r, nodes[4].Addr)["quarantined_until"] != nil
	})
	wantQuarantined(t, gw, nodes, map[int]bool{0: true, 4: true})

	var e *Resp
	eventually(t, 5*time.Second, "extend puts the lock back on the quarantined empty node", func() bool {
		e = extend(t, gw, res, tok, `{"ttl_ms":6000}`)
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
	eventually(t, 5*time.Second, "release removes the lock from every node, quarantined ones too", func() bool {
		return len(holders(t, nodes, res, tok)) == 0
	})
	if el := time.Since(restarted); el > maxTTL-2*time.Second {
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

// TestQuarantineReplicaRoundTrip: a node made a replica and a master again
// between two health checks (no request in between) may have lost its keys
// to the sync: it is quarantined for max TTL all the same (its
// master_replid changed), and says so in /readyz and the gauge
// (docs/safety.md "What happens in each fault", Replica made master again).
func TestQuarantineReplicaRoundTrip(t *testing.T) {
	t.Parallel()
	const maxTTL = 3 * time.Second
	nodes := startCluster(t, 5)
	gw := startUnready(t, nodes, "--restart-quarantine", "on", "--default-ttl", "1s", "--max-ttl", maxTTL.String(),
		"--node-timeout", nodeTimeout.String())
	gw.waitReady(t)
	allVoting(t, gw, nodes, maxTTL)
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
