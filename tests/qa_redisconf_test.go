package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// TestQARedisConfEvictingPolicyWarns: a node at a maxmemory with an evicting
// maxmemory-policy (allkeys-lru, volatile-ttl) may evict lock keys, which
// breaks mutual exclusion: the gateway warns about each such node, and not
// about one with noeviction or no maxmemory.
func TestQARedisConfEvictingPolicyWarns(t *testing.T) {
	nodes := nodesOf(
		redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"),
		redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"),
		redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction"),
		redistest.Start(t, "--maxmemory-policy", "allkeys-random"), // no maxmemory: nothing is evicted
	)
	gw := startGateway(t, nodes)
	warned := func(n *RedisNode) string {
		for line := range strings.SplitSeq(gw.Stderr(), "\n") {
			if strings.Contains(line, `"node":"`+n.Addr+`"`) && strings.Contains(line, "evict") {
				return line
			}
		}
		return ""
	}
	eventually(t, 5*time.Second, "a warning about each evicting node", func() bool {
		return strings.Contains(warned(nodes[0]), `"maxmemory_policy":"allkeys-lru"`) &&
			strings.Contains(warned(nodes[1]), `"maxmemory_policy":"volatile-ttl"`)
	})
	for _, n := range nodes[2:] {
		if w := warned(n); w != "" {
			t.Errorf("a warning about node %s, which evicts nothing: %s", n.Addr, w)
		}
	}
	if !strings.Contains(warned(nodes[0]), `"level":"warn"`) {
		t.Errorf("the warning is not at warn level: %s", warned(nodes[0]))
	}
}

// TestQARedisConfClusterModeNodeDown: a redis-server in cluster mode, even
// one serving every hash slot, refuses every lock (the scripts' keys hash
// to different slots: CROSSSLOT), so it can never vote: /readyz and
// redlockd_node_up show it down, and say why, from the first check on.
func TestQARedisConfClusterModeNodeDown(t *testing.T) {
	plain := startCluster(t, 2)
	cl := nodesOf(redistest.Start(t, "--cluster-enabled", "yes"))[0]
	ctx := t.Context()
	if err := cl.Client().Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the cluster node serves every slot", func() bool {
		info, _ := cl.Client().ClusterInfo(ctx).Result()
		return strings.Contains(info, "cluster_state:ok")
	})
	nodes := append(plain, cl)
	gw := startGateway(t, nodes)
	r := gw.do(t, http.MethodGet, "/readyz", "")
	st := readyNode(t, r, cl.Addr)
	errText, _ := st["err"].(string)
	if st["up"] != false || !strings.Contains(errText, "cluster mode") {
		t.Errorf("/readyz shows the cluster-mode node %v, want down for cluster mode: %s", st, r.Body)
	}
	if v, _ := scrapeMetrics(t, gw).get("redlockd_node_up", "node", cl.Addr); v != 0 {
		t.Errorf("redlockd_node_up{node=%s} = %v, want 0", cl.Addr, v)
	}
	a := acquire(t, gw, resourceName(t), "")
	wantStatus(t, a, http.StatusCreated)
	if got := a.num(t, "locked_nodes"); got != 2 {
		t.Errorf("locked_nodes = %d, want 2 (the cluster-mode node refuses)", got)
	}
}
