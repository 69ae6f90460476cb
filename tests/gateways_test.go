package tests

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestMultiGwKinds: with two gateways on the same nodes, every kind taken
// through one is one lock for both: a retry of the acquire with the same
// client token through the other gets the same fencing token, a stranger is
// refused there, the other extends and releases it, and fencing tokens only
// grow across the gateways, also after one restarts (docs/operations.md
// "Topology": every gateway gets the same configuration; docs/safety.md
// "Guarantees and limits, in plain words").
func TestMultiGwKinds(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b := startGateway(t, nodes), startGateway(t, nodes)
	last := map[string]int64{} // the kind's resource → its last fencing token
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			res, tok := "multigw-"+k.name, clientToken(t)
			first := k.acquire(t, a, res, `,"token":"`+tok+`"`)
			wantStatus(t, first, http.StatusCreated)
			fence := fenceOf(t, first)
			again := k.acquire(t, b, res, `,"token":"`+tok+`"`)
			wantStatus(t, again, http.StatusCreated)
			if got := fenceOf(t, again); got != fence {
				t.Errorf("idempotent retry through the other gateway: fencing token %d, want %d", got, fence)
			}
			if k.name == "read" {
				wantProblem(t, acquire(t, b, res, ""), http.StatusConflict, "lock-held")
			} else {
				wantProblem(t, k.acquire(t, b, res, ""), http.StatusConflict, "lock-held")
			}
			ext := b.do(t, http.MethodPatch, k.url(res), `{"ttl_ms":20000}`, "Lock-Token", tok)
			wantStatus(t, ext, http.StatusOK)
			if got := fenceOf(t, ext); got != fence {
				t.Errorf("extend through the other gateway: fencing token %d, want %d", got, fence)
			}
			wantStatus(t, b.do(t, http.MethodDelete, k.url(res), "", "Lock-Token", tok), http.StatusNoContent)
			wantStatus(t, a.do(t, http.MethodDelete, k.url(res), "", "Lock-Token", tok), http.StatusNoContent)
			for _, g := range []*Gateway{b, a} {
				r := k.acquire(t, g, res, "")
				wantStatus(t, r, http.StatusCreated)
				if got := fenceOf(t, r); got < fence || got == fence && k.name != "read" {
					t.Errorf("fencing token %d after %d", got, fence)
				}
				fence = fenceOf(t, r)
				wantStatus(t, g.do(t, http.MethodDelete, k.url(res), "", "Lock-Token", r.str(t, "token")), http.StatusNoContent)
			}
			last[k.name] = fence
		})
	}
	a.Stop()
	a = startGateway(t, nodes)
	for _, k := range lockKinds {
		r := k.acquire(t, a, "multigw-"+k.name, "")
		wantStatus(t, r, http.StatusCreated)
		if got := fenceOf(t, r); got < last[k.name] || got == last[k.name] && k.name != "read" {
			t.Errorf("%s: fencing token %d after a gateway restart, after %d", k.name, got, last[k.name])
		}
	}
}

// fenceOf is the fencing token of an acquire's or extend's answer: of its
// first resource for a lock on several (a reader's is the last writer's).
func fenceOf(t testing.TB, r *Resp) int64 {
	t.Helper()
	if rs, ok := r.JSON["resources"].([]any); ok && len(rs) > 0 {
		first, _ := rs[0].(map[string]any)
		return (&Resp{Method: r.Method, Path: r.Path, JSON: first, Body: r.Body}).num(t, "fencing_token")
	}
	return r.num(t, "fencing_token")
}

// TestMultiGwPrefixes: two deployments with different --key-prefix on the
// same nodes are fully apart: the same names are locked in each, each lists
// only its own, each hears releases on its own channel, and every key either
// writes, its health key included, is under its prefix (docs/operations.md
// "Topology").
func TestMultiGwPrefixes(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b := startGateway(t, nodes), startGateway(t, nodes, "--key-prefix", "other:")
	res := resourceName(t)
	for _, k := range lockKinds {
		r := k.acquire(t, a, res+k.name, `,"ttl_ms":30000`)
		wantStatus(t, r, http.StatusCreated)
		wantStatus(t, k.acquire(t, a, res+k.name+".a", ""), http.StatusCreated)
		if rb := k.acquire(t, b, res+k.name, `,"ttl_ms":30000`); rb.Status != http.StatusCreated {
			t.Errorf("%s: the other deployment's acquire: %s", k.name, rb)
		}
	}
	ctx := context.Background()
	eventually(t, 10*time.Second, "each gateway subscribed to its own channel", func() bool {
		subs, err := nodes[0].Client().PubSubNumSub(ctx, "redlockd:released", "other:released").Result()
		chs, _ := nodes[0].Client().PubSubChannels(ctx, "*").Result()
		return err == nil && subs["redlockd:released"] == 1 && subs["other:released"] == 1 && len(chs) == 2
	})
	la, lb := listAll(t, a, "", "", nil), listAll(t, b, "", "", nil)
	for name := range la {
		if _, ok := lb[name]; !ok && !strings.Contains(name, ".a") {
			t.Errorf("a lists %s, b does not", name)
		}
	}
	for name := range lb {
		if _, ok := la[name]; !ok || strings.Contains(name, ".a") {
			t.Errorf("b lists %s (a lists %v)", name, la)
		}
	}
	for _, n := range nodes {
		for _, pre := range []string{"redlockd:", "other:"} {
			if v, err := n.Client().Get(ctx, pre+"health").Result(); err != nil || v == "" {
				t.Errorf("%s: %shealth: %q, %v", n.Addr, pre, v, err)
			}
		}
		keys, err := n.Client().Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, "redlockd:") && !strings.HasPrefix(k, "other:") {
				t.Errorf("%s: key %q under neither prefix", n.Addr, k)
			}
			if strings.HasPrefix(k, "other:") && strings.Contains(k, ".a") {
				t.Errorf("%s: key %q of a under b's prefix", n.Addr, k)
			}
		}
	}
}

// TestMultiGwNodeOrder: a gateway given the same nodes in another order holds
// the same locks, but answers 400 to a listing cursor from a gateway with the
// other order (a cursor names a node by its place: followed, the listing
// would skip locks without a word, here q, on nodes 2-4 only); gateways with
// the same order page through one listing together, every lock once
// (docs/operations.md "Topology"; openapi.yaml GET /locks: cursor).
func TestMultiGwNodeOrder(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	a, a2 := startGateway(t, nodes), startGateway(t, nodes)
	b := startGateway(t, []*RedisNode{nodes[4], nodes[3], nodes[2], nodes[1], nodes[0]})
	pre := resourceName(t) + "-"
	for _, res := range []string{pre + "p", pre + "q"} {
		r := acquire(t, a, res, `{"ttl_ms":30000}`)
		wantStatus(t, r, http.StatusCreated)
		waitHolders(t, nodes, res, r.str(t, "token"), 5)
		wantProblem(t, acquire(t, b, res, ""), http.StatusConflict, "lock-held")
	}
	for _, n := range nodes[:2] { // q as after a restart of nodes 0 and 1
		if err := n.Client().Del(context.Background(), lockKey(pre+"q")).Err(); err != nil {
			t.Fatal(err)
		}
	}
	first := a.do(t, http.MethodGet, "/locks?limit=1&prefix="+pre, "")
	wantStatus(t, first, http.StatusOK)
	cursor := "&cursor=" + url.QueryEscape(first.str(t, "next_cursor"))
	wantProblem(t, b.do(t, http.MethodGet, "/locks?limit=1&prefix="+pre+cursor, ""), http.StatusBadRequest, "invalid-request")

	seen := map[string]int{}
	for page, cursor := 0, ""; page < 100; page++ {
		r := []*Gateway{a, a2}[page%2].do(t, http.MethodGet, "/locks?limit=1&prefix="+pre+cursor, "")
		wantStatus(t, r, http.StatusOK)
		for _, l := range r.JSON["locks"].([]any) {
			seen[l.(map[string]any)["resource"].(string)]++
		}
		next, ok := r.JSON["next_cursor"].(string)
		if !ok {
			break
		}
		cursor = "&cursor=" + url.QueryEscape(next)
	}
	if want := map[string]int{pre + "p": 1, pre + "q": 1}; !maps.Equal(seen, want) {
		t.Errorf("listed %v, want %v", seen, want)
	}
}

// TestMultiGwNamespaces: in one deployment (one prefix) whose gateways have
// different keys files, a namespace is the same on every gateway, whichever
// key names it, namespaces stay apart across gateways, and a key a gateway
// does not know is 401 there (openapi.yaml info.description
// "Authentication and namespaces").
func TestMultiGwNamespaces(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a1, a2, b := keygen(t, "a1", "team-a"), keygen(t, "a2", "team-a"), keygen(t, "b", "team-b")
	ga := startGateway(t, nodes, "--api-keys-file", keysFile(t, a1))
	gb := startGateway(t, nodes, "--api-keys-file", keysFile(t, a2, b))
	open := startGateway(t, nodes)
	res := "/locks/" + resourceName(t)
	r := ga.do(t, http.MethodPost, res, `{"owner":"a1"}`, bearer(a1.Key)...)
	wantStatus(t, r, http.StatusCreated)
	tok := r.str(t, "token")
	wantProblem(t, gb.do(t, http.MethodPost, res, "", bearer(a2.Key)...), http.StatusConflict, "lock-held")
	if in := gb.do(t, http.MethodGet, res, "", bearer(a2.Key)...); in.Status != http.StatusOK || in.str(t, "owner") != "a1" {
		t.Errorf("team-a's lock inspected through the other gateway: %s", in)
	}
	wantProblem(t, gb.do(t, http.MethodGet, res, "", bearer(a1.Key)...), http.StatusUnauthorized, "unauthorized")
	wantStatus(t, gb.do(t, http.MethodPost, res, "", bearer(b.Key)...), http.StatusCreated)
	wantStatus(t, open.do(t, http.MethodPost, res, ""), http.StatusCreated)
	wantProblem(t, gb.do(t, http.MethodDelete, res, "", append(bearer(b.Key), "Lock-Token", tok)...), http.StatusConflict, "not-owner")
	wantStatus(t, gb.do(t, http.MethodDelete, res, "", append(bearer(a2.Key), "Lock-Token", tok)...), http.StatusNoContent)
}

// TestMultiGwSettings: gateways with different TTL limits and node timeouts
// on the same nodes share the locks, and each applies its own limits to the
// requests it serves: a lock taken for longer than the other's --max-ttl is
// held there too, extended there with that gateway's default TTL (a TTL above
// its max is 400 there) and released there, and a retried release through the
// first still answers 204 (docs/operations.md "Topology").
func TestMultiGwSettings(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a := startGateway(t, nodes)
	b := startGateway(t, nodes, "--max-ttl", "5s", "--default-ttl", "2s", "--node-timeout", "200ms")
	res := resourceName(t)
	r := acquire(t, a, res, `{"ttl_ms":60000}`)
	wantStatus(t, r, http.StatusCreated)
	tok := r.str(t, "token")
	if in := inspect(t, b, res); in.num(t, "remaining_ms") <= 5000 {
		t.Errorf("b inspects %s, want the 60 s of a's lock", in.Body)
	}
	wantProblem(t, acquire(t, b, res, ""), http.StatusConflict, "lock-held")
	if e := extend(t, b, res, tok, ""); e.Status != http.StatusOK || e.num(t, "ttl_ms") != 2000 {
		t.Errorf("b extends with its default TTL: %s", e)
	}
	wantProblem(t, extend(t, b, res, tok, `{"ttl_ms":60000}`), http.StatusBadRequest, "invalid-request")
	wantStatus(t, extend(t, a, res, tok, `{"ttl_ms":60000}`), http.StatusOK)
	wantStatus(t, release(t, b, res, tok), http.StatusNoContent)
	wantStatus(t, release(t, a, res, tok), http.StatusNoContent)
}

// TestMultiGwSubsetWarns: a gateway given 3 of the 5 nodes of another has a
// quorum of 2 where the other's is 3, so that both can hold the same lock;
// neither can prevent it, but each logs an error naming a node they share and
// both numbers of nodes, within a few health checks (docs/operations.md
// "Topology").
func TestMultiGwSubsetWarns(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	a, b := startGateway(t, nodes), startGateway(t, nodes[:3])
	for _, g := range []*Gateway{a, b} {
		eventually(t, 10*time.Second, "the error logged", func() bool {
			return strings.Contains(g.Stderr(), "was given another number of nodes")
		})
	}
	if s := a.Stderr(); !strings.Contains(s, `"mine":"n=5","other":"n=3"`) || strings.Contains(s, nodes[4].Addr+`","mine"`) {
		t.Errorf("a's log:\n%s", s)
	}
}

// TestMultiGwExpiryWakes: a holder through one gateway that never releases (a
// crashed client) lets a waiter of every kind on another gateway in soon
// after its TTL ends, not at the fallback poll (docs/safety.md
// "Guarantees and limits, in plain words": waiting).
func TestMultiGwExpiryWakes(t *testing.T) {
	t.Parallel()
	acrossGateways(t, func(t *testing.T, a, b *Gateway, k, waiter lockKind, res string) {
		wantStatus(t, k.acquire(t, a, res, `,"ttl_ms":1000`), http.StatusCreated)
		start := time.Now()
		wantStatus(t, waiter.acquire(t, b, res, `,"wait_ms":25000`), http.StatusCreated)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the waiter got it %v after a 1 s TTL", d)
		}
	})
}

// acrossGateways runs f for each kind k on two gateways a and b over the
// same 3 nodes, on a fresh resource res, with waiter the kind that waits
// behind k (a writer behind readers).
func acrossGateways(t *testing.T, f func(t *testing.T, a, b *Gateway, k, waiter lockKind, res string)) {
	nodes := startCluster(t, 3)
	a, b := startGateway(t, nodes), startGateway(t, nodes)
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			waiter := k
			if k.name == "read" {
				waiter = lockKinds[0]
			}
			f(t, a, b, k, waiter, resourceName(t))
		})
	}
}

// TestMultiGwSemaphoreLimit: a semaphore's limit holds across gateways, and
// so does its limit-mismatch check: with both permits taken through two
// gateways, a third refuses another acquire with 409 lock-held, one with
// another limit with 409 limit-mismatch, and shows both permits held
// (docs/semaphores.md "The API").
func TestMultiGwSemaphoreLimit(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gws := []*Gateway{startGateway(t, nodes), startGateway(t, nodes), startGateway(t, nodes)}
	url := "/semaphores/" + resourceName(t)
	permits := map[int64]bool{}
	for _, g := range gws[:2] {
		r := g.do(t, http.MethodPost, url, `{"limit":2}`)
		wantStatus(t, r, http.StatusCreated)
		permits[r.num(t, "permit")] = true
	}
	if len(permits) != 2 {
		t.Errorf("permits %v, want 0 and 1", permits)
	}
	wantProblem(t, gws[2].do(t, http.MethodPost, url, `{"limit":2}`), http.StatusConflict, "lock-held")
	wantProblem(t, gws[2].do(t, http.MethodPost, url, `{"limit":3}`), http.StatusConflict, "limit-mismatch")
	if in := gws[2].do(t, http.MethodGet, url, ""); in.Status != http.StatusOK || in.num(t, "held") != 2 {
		t.Errorf("inspected through the third gateway: %s", in)
	}
}

// TestMultiGwFencingNodeRestart: fencing tokens handed out by one gateway and
// then another only grow when a node restarts empty in between, and a client
// token retried through the other gateway after its lock expired is a new
// acquisition with a greater token (docs/safety.md
// "When fencing tokens can go backwards", and
// "Guarantees and limits, in plain words": idempotent acquire).
func TestMultiGwFencingNodeRestart(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	a, b := startGateway(t, nodes), startGateway(t, nodes)
	res, tok := resourceName(t), clientToken(t)
	var fence int64
	for i, g := range []*Gateway{a, b, a, b} {
		r := acquire(t, g, res, `{"ttl_ms":200,"token":"`+tok+`"}`)
		wantStatus(t, r, http.StatusCreated)
		if got := r.num(t, "fencing_token"); got <= fence {
			t.Errorf("acquire %d: fencing token %d after %d", i, got, fence)
		}
		fence = r.num(t, "fencing_token")
		waitHolders(t, nodes, res, tok, 0) // expired
		nodes[i].Restart()
	}
}
