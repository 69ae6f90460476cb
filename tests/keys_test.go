package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// keysWithoutTTL lists the keys of nodes that have no TTL: a key that lives
// forever.
func keysWithoutTTL(t testing.TB, nodes []*RedisNode) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for i, n := range nodes {
		keys, err := n.Client().Keys(ctx, "*").Result()
		if err != nil {
			t.Fatalf("node %d: KEYS: %v", i, err)
		}
		for _, k := range keys {
			if ttl, err := n.Client().PTTL(ctx, k).Result(); err == nil && ttl == -1 {
				out = append(out, fmt.Sprintf("node%d %s", i, k))
			}
		}
	}
	return out
}

// TestEveryKeyHasATTL: no key that a request creates lives forever: every key
// of every kind, held, waited for, released and refused, fence counters
// included, has a TTL (docs/safety.md
// "Guarantees and limits, in plain words": Keys).
func TestEveryKeyHasATTL(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes)
	check := func(when string) {
		t.Helper()
		if keys := keysWithoutTTL(t, nodes); len(keys) > 0 {
			t.Fatalf("%s: keys without a TTL:\n%s", when, strings.Join(keys, "\n"))
		}
	}
	res := resourceName(t)
	for _, k := range lockKinds {
		holder := k.acquire(t, gw, res, "")
		wantStatus(t, holder, http.StatusCreated)
		// A waiter that gives up: its rounds leave what waiting leaves.
		wantProblem(t, k.keptOut().acquire(t, gw, res, `,"wait_ms":300`), http.StatusConflict, "lock-held")
		check("held, " + k.name)
		wantStatus(t, gw.do(t, http.MethodDelete, k.url(res), "", "Lock-Token", holder.str(t, "token")), http.StatusNoContent)
		check("released, " + k.name)
	}
}

// TestReassertedKeysHaveATTL: the keys that an extension puts back on a
// node that restarted empty (reassert.lua, a reader's records and a
// permit's index included) have a TTL too (docs/safety.md "Guarantees and
// limits, in plain words": Keys).
func TestReassertedKeysHaveATTL(t *testing.T) {
	t.Parallel()
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			nodes := startCluster(t, 3)
			gw := startGateway(t, nodes)
			res := resourceName(t)
			holder := k.acquire(t, gw, res, `,"ttl_ms":30000`)
			wantStatus(t, holder, http.StatusCreated)
			nodes[0].Restart()
			// Each extension finds the lock absent on the restarted node once
			// the gateway's connection to it is new; the put-back follows.
			eventually(t, 30*time.Second, "the lock put back on the restarted node", func() bool {
				wantStatus(t, gw.do(t, http.MethodPatch, k.url(res), `{"ttl_ms":30000}`, "Lock-Token", holder.str(t, "token")), http.StatusOK)
				n, err := nodes[0].Client().DBSize(context.Background()).Result()
				return err == nil && n > 1 // more than the fence counter
			})
			if keys := keysWithoutTTL(t, nodes); len(keys) > 0 {
				t.Fatalf("keys without a TTL after the put-back:\n%s", strings.Join(keys, "\n"))
			}
		})
	}
}
