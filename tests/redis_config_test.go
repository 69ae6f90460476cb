package tests

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/internal/redistest"
)

// TestRedisConfEvictingPolicyWarns: a node at a maxmemory with an evicting
// maxmemory-policy (allkeys-lru, volatile-ttl) may evict lock keys, which
// breaks mutual exclusion: the gateway warns about each such node, and not
// about one with noeviction or no maxmemory (docs/operations.md "Redis
// configuration").
func TestRedisConfEvictingPolicyWarns(t *testing.T) {
	t.Parallel()
	nodes := nodesOf(
		redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"),
		redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"),
		redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction"),
		redistest.Start(t, "--maxmemory-policy", "allkeys-random"), // no maxmemory: nothing is evicted
	)
	gw := startGateway(t, nodes)
	warned := func(n *RedisNode) string { return nodeWarning(gw, n, "evict") }
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

// nodeWarning returns gw's first log line about node n that contains what,
// or "".
func nodeWarning(gw *Gateway, n *RedisNode, what string) string {
	for line := range strings.SplitSeq(gw.Stderr(), "\n") {
		if strings.Contains(line, `"node":"`+n.Addr+`"`) && strings.Contains(line, what) {
			return line
		}
	}
	return ""
}

// TestRedisConfNoAOFWarns: with the restart quarantine off (safe only with
// appendfsync always), a node without an append-only file restarts empty and
// votes at once: the gateway warns about it, and not about a node with one
// (docs/operations.md "Redis configuration").
func TestRedisConfNoAOFWarns(t *testing.T) {
	t.Parallel()
	nodes := nodesOf(redistest.Start(t), redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always"), redistest.Start(t))
	gw := startGateway(t, nodes) // quarantine off
	eventually(t, 5*time.Second, "a warning about each node without an append-only file", func() bool {
		return nodeWarning(gw, nodes[0], "append-only") != "" && nodeWarning(gw, nodes[2], "append-only") != ""
	})
	if w := nodeWarning(gw, nodes[1], "append-only"); w != "" {
		t.Errorf("a warning about node %s, which has an append-only file: %s", nodes[1].Addr, w)
	}
}

// TestRedisConfClusterModeNodeDown: a redis-server in cluster mode, even
// one serving every hash slot, refuses every lock (the scripts' keys hash
// to different slots: CROSSSLOT), so it can never vote: /readyz and
// redlockd_node_up show it down, and say why, from the first check on
// (docs/operations.md "Redis configuration").
func TestRedisConfClusterModeNodeDown(t *testing.T) {
	t.Parallel()
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

// TestRedisConfDatabases: two gateways on database 0 and database 1 of
// the same servers (/N in the URLs) hold separate locks: the same resource
// is granted by both, each lock's keys are in its own database, and a
// release through one leaves the other's lock held (docs/operations.md
// "Redis configuration").
func TestRedisConfDatabases(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gws := make([]*Gateway, 2)
	for db := range gws {
		urls := strings.Split(redisURLs(nodes), ",")
		for i := range urls {
			urls[i] += "/" + strconv.Itoa(db)
		}
		gws[db] = startServe(t, urls)
		gws[db].waitReady(t)
	}
	res := resourceName(t)
	a0 := acquire(t, gws[0], res, "")
	wantStatus(t, a0, http.StatusCreated)
	a1 := acquire(t, gws[1], res, "")
	wantStatus(t, a1, http.StatusCreated)
	for db, a := range []*Resp{a0, a1} {
		want := a.str(t, "token")
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n.Addr, DB: db})
			got := lockHolder(t, c, lockKey(res))
			c.Close()
			if got != "" && got != want {
				t.Errorf("db %d of %s holds %q for %s, want the token of that database's gateway", db, n.Addr, got, res)
			}
		}
	}
	wantStatus(t, release(t, gws[0], res, a0.str(t, "token")), http.StatusNoContent)
	if r := inspectAnswered(t, gws[1], res); r.JSON["held"] != true {
		t.Errorf("after a release on db 0, db 1's lock is not held: %s", r.Body)
	}
}
