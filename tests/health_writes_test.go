package tests

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// writeFault makes a node answer PING but refuse writes, and undoes it.
type writeFault struct {
	name   string
	detail string // in the acquire's 503 detail
	err    string // the start of the node's err in /readyz
	start  func(t *testing.T, n *RedisNode)
	stop   func(t *testing.T, n *RedisNode)
}

// redisDo runs an admin command on n and fails the test if it fails.
func redisDo(t *testing.T, n *RedisNode, args ...any) {
	t.Helper()
	if err := n.Client().Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v on %s: %v", args, n.Addr, err)
	}
}

// TestHealthWrites: with 3 of 5 nodes that answer PING but refuse writes
// (replicas: READONLY; at maxmemory with noeviction: OOM; under CLIENT PAUSE
// WRITE: a write blocks, a timeout), /readyz says 503 within a few health
// intervals and stays 503 across several (no flapping back up between them,
// while acquires and inspects run), with each refusing node down and why,
// redlockd_node_up 0, and every acquire's 503 detail names the refusals or
// the timeouts. Once writes work again the nodes are up again; former
// replicas, made masters again, are quarantined for max TTL (shown in
// quarantined_until) and do not vote meanwhile (docs/safety.md
// "What happens in each fault": node refuses writes, replica made master
// again).
func TestHealthWrites(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	const maxTTL = 3 * time.Second
	faults := []writeFault{
		{name: "READONLY", detail: "3 of 5 nodes refused (READONLY ×3), 0 did not answer in time; quorum is 3",
			err: "READONLY: replica, refuses writes",
			start: func(t *testing.T, n *RedisNode) {
				m := startRedis(t)
				redisDo(t, n, "REPLICAOF", "127.0.0.1", m.Port)
			},
			stop: func(t *testing.T, n *RedisNode) { redisDo(t, n, "REPLICAOF", "NO", "ONE") }},
		{name: "OOM", detail: "3 of 5 nodes refused (OOM ×3), 0 did not answer in time; quorum is 3",
			err: "OOM: at maxmemory, refuses writes",
			start: func(t *testing.T, n *RedisNode) {
				redisDo(t, n, "CONFIG", "SET", "maxmemory-policy", "noeviction")
				redisDo(t, n, "CONFIG", "SET", "maxmemory", "1")
			},
			stop: func(t *testing.T, n *RedisNode) { redisDo(t, n, "CONFIG", "SET", "maxmemory", "0") }},
		{name: "PAUSE-WRITE", detail: "0 of 5 nodes refused, 3 did not answer in time; quorum is 3",
			err:   "writes get no answer within the node timeout",
			start: func(t *testing.T, n *RedisNode) { redisDo(t, n, "CLIENT", "PAUSE", 600000, "WRITE") },
			stop:  func(t *testing.T, n *RedisNode) { redisDo(t, n, "CLIENT", "UNPAUSE") }},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			nodes := startCluster(t, 5)
			gw := startGateway(t, nodes, "--restart-quarantine", "on", "--default-ttl", "1s",
				"--max-ttl", maxTTL.String(), "--node-timeout", nodeTimeout.String())
			lock(t, gw, resourceName(t), "")

			for _, n := range nodes[:3] {
				f.start(t, n)
			}
			refusing := func(r *Resp) bool {
				if r.Status != http.StatusServiceUnavailable || r.JSON["status"] != "unready" {
					return false
				}
				for i, n := range nodes {
					st := readyNode(t, r, n.Addr)
					errText, _ := st["err"].(string)
					if i < 3 && (st["up"] != false || !strings.HasPrefix(errText, f.err)) || i >= 3 && st["up"] != true {
						return false
					}
				}
				return true
			}
			var r *Resp
			eventually(t, 10*time.Second, "/readyz 503 with the refusing nodes down", func() bool {
				r = gw.do(t, http.MethodGet, "/readyz", "")
				return refusing(r)
			})
			t.Logf("/readyz: %s", r.Body)

			// Several health intervals (1s): it stays so, whatever requests run.
			for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); {
				a := acquire(t, gw, resourceName(t), "")
				wantProblem(t, a, http.StatusServiceUnavailable, "quorum-unavailable")
				if d := a.str(t, "detail"); !strings.HasPrefix(d, f.detail) {
					t.Fatalf("acquire detail %q, want it to start %q", d, f.detail)
				}
				inspect(t, gw, resourceName(t)) // read-only: a replica answers it
				if r := gw.do(t, http.MethodGet, "/readyz", ""); !refusing(r) {
					t.Fatalf("/readyz changed while 3 nodes refuse writes: %s", r.Body)
				}
				m := scrapeMetrics(t, gw)
				for i, n := range nodes {
					up, ok := m.get("redlockd_node_up", "node", n.Addr)
					if want := float64(boolInt(i >= 3)); !ok || up != want {
						t.Fatalf("redlockd_node_up{node=%s} = %v, %v; want %v", n.Addr, up, ok, want)
					}
				}
				time.Sleep(100 * time.Millisecond) // time is the subject: sample it
			}

			for _, n := range nodes[:3] {
				f.stop(t, n)
			}
			stopped := time.Now()
			eventually(t, 10*time.Second, "every node up again", func() bool {
				r = gw.do(t, http.MethodGet, "/readyz", "")
				return countUp(r) == 5
			})
			if f.name != "READONLY" {
				wantStatus(t, r, http.StatusOK)
				lock(t, gw, resourceName(t), "")
				return
			}
			// Former replicas: quarantined for max TTL, not voting.
			wantStatus(t, r, http.StatusServiceUnavailable)
			for _, n := range nodes[:3] {
				checkQuarantine(t, r, n, stopped, maxTTL, time.Second)
			}
			a := acquire(t, gw, resourceName(t), "")
			wantProblem(t, a, http.StatusServiceUnavailable, "quorum-unavailable")
			if d := a.str(t, "detail"); !strings.Contains(d, "3 in quarantine") {
				t.Errorf("acquire while the former replicas are quarantined: detail %q", d)
			}
			if el := time.Since(stopped); el >= maxTTL-time.Second {
				t.Fatalf("the checks took %v: the quarantine (%v) is nearly over", el, maxTTL)
			}
			// The log reaches the test through a pipe: await the line.
			eventually(t, 5*time.Second, "the warning about the former replicas in the log", func() bool {
				return strings.Contains(gw.Stderr(), "was a replica and is a master again")
			})
			gw.waitReady(t)
			if el := time.Since(stopped); el < maxTTL-time.Second {
				t.Errorf("ready %v after the replicas became masters again, want about max TTL %v", el, maxTTL)
			}
			// The former replicas vote again: with nodes 3 and 4 down, a lock
			// needs all three.
			nodes[3].Kill()
			nodes[4].Kill()
			lock(t, gw, resourceName(t), "")
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
