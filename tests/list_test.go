package tests

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// listAll lists every page of GET /locks?query with key, checking each
// page, and counts how often each resource was listed.
func listAll(t *testing.T, gw *Gateway, key, query string, tokens []string) map[string]int {
	t.Helper()
	seen := map[string]int{}
	cursor := ""
	for pages := 0; pages < 1000; pages++ {
		path := "/locks?" + query
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := gw.do(t, http.MethodGet, path, "", bearer(key)...)
		wantStatus(t, r, http.StatusOK)
		for _, tok := range tokens {
			wantNoSecret(t, r, tok)
		}
		locks, _ := r.JSON["locks"].([]any)
		for _, l := range locks {
			m, _ := l.(map[string]any)
			res, _ := m["resource"].(string)
			seen[res]++
		}
		next, ok := r.JSON["next_cursor"].(string)
		if !ok {
			return seen
		}
		cursor = next
	}
	t.Fatal("the listing does not end")
	return nil
}

// TestList: GET /locks lists the locks held: over several pages of small
// limits every lock held is listed exactly once, released ones and one held
// on a minority of nodes are not, prefixes filter, a key sees only its
// namespace, tokens never appear, bad parameters are 400, and one node down
// still lists everything (docs/operations.md
// "Who holds what: listing the locks"; openapi.yaml GET /locks).
func TestList(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	a, b := keygen(t, "svc-a", "team-a"), keygen(t, "svc-b", "team-b")
	gw := startGateway(t, nodes, "--api-keys-file", keysFile(t, a, b))
	pre := resourceName(t) + "-"
	var tokens []string
	held := map[string]int{}
	for i := range 11 {
		res := fmt.Sprintf("%sjob-%02d", pre, i)
		r := gw.do(t, http.MethodPost, "/locks/"+res, `{"ttl_ms":30000}`, bearer(a.Key)...)
		wantStatus(t, r, http.StatusCreated)
		tokens = append(tokens, r.str(t, "token"))
		held[res] = 1
	}
	for _, i := range []int{2, 7} {
		res := fmt.Sprintf("%sjob-%02d", pre, i)
		wantStatus(t, gw.do(t, http.MethodDelete, "/locks/"+res, "", append(bearer(a.Key), "Lock-Token", tokens[i])...), http.StatusNoContent)
		delete(held, res)
	}
	rb := gw.do(t, http.MethodPost, "/locks/"+pre+"job-b", `{"ttl_ms":30000}`, bearer(b.Key)...)
	wantStatus(t, rb, http.StatusCreated)
	tokens = append(tokens, rb.str(t, "token"))
	ctx := context.Background()
	for _, n := range nodes[:2] { // a minority: not held
		if err := n.Client().Set(ctx, "redlockd:lock:team-a/"+pre+"job-minority", clientToken(t), 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A round is decided at the quorum: wait until every node has every lock
	// (or its release), so that each lock is found on its lowest node first.
	eventually(t, 5*time.Second, "every lock on every node", func() bool {
		for _, n := range nodes {
			keys, err := n.Client().Keys(ctx, "redlockd:lock:team-a/"+pre+"job-[0-9]*").Result()
			if err != nil {
				return false
			}
			count := 0
			for _, k := range keys {
				if lockHolder(t, n.Client(), k) != "" {
					count++
				}
			}
			if count != len(held) {
				return false
			}
		}
		return true
	})

	for _, limit := range []int{1, 3, 1000} {
		if seen := listAll(t, gw, a.Key, fmt.Sprintf("prefix=%s&limit=%d", pre+"job-", limit), tokens); !maps.Equal(seen, held) {
			t.Errorf("limit %d: listed %v, want %v", limit, seen, held)
		}
	}
	if seen := listAll(t, gw, a.Key, "prefix="+pre+"job-0", tokens); len(seen) != 8 {
		t.Errorf("prefix job-0: listed %v", slices.Sorted(maps.Keys(seen)))
	}
	if seen := listAll(t, gw, b.Key, "", tokens); !maps.Equal(seen, map[string]int{pre + "job-b": 1}) {
		t.Errorf("key b listed %v", seen)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "prefix=a*", "prefix=a%2Fb", "prefix=" + strings.Repeat("a", 201),
		"cursor=not-a-cursor", "cursor=%21"} {
		wantProblem(t, gw.do(t, http.MethodGet, "/locks?"+q, "", bearer(a.Key)...), http.StatusBadRequest, "invalid-request")
	}
	wantProblem(t, gw.do(t, http.MethodGet, "/locks", ""), http.StatusUnauthorized, "unauthorized")

	nodes[1].Kill()
	if seen := listAll(t, gw, a.Key, "limit=4&prefix="+pre+"job-", tokens); !maps.Equal(seen, held) {
		t.Errorf("node 1 down: listed %v, want %v", seen, held)
	}
}
