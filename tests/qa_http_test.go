package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestReadyzNodesNeedKey: with --api-keys-file, /readyz stays open (its
// status and quorum answer every caller) but lists the nodes only for a
// request with a valid key; a missing or unknown key is no 401 there.
func TestReadyzNodesNeedKey(t *testing.T) {
	nodes := startCluster(t, 3)
	k := keygen(t, "ops", "ops")
	gw := startGateway(t, nodes, "--api-keys-file", keysFile(t, k))
	for name, hdr := range map[string][]string{"no key": nil, "unknown key": bearer("not-a-key-0123456789abcdefghijkl")} {
		r := gw.do(t, http.MethodGet, "/readyz", "", hdr...)
		wantStatus(t, r, http.StatusOK)
		if r.str(t, "status") != "ready" || r.num(t, "quorum") != 2 {
			t.Errorf("%s: %s", name, r)
		}
		if ns, ok := r.JSON["nodes"].([]any); !ok || len(ns) != 0 {
			t.Errorf("%s: /readyz lists the nodes to a caller without a valid key: %s", name, r.Body)
		}
		for _, n := range nodes {
			if addr := strings.TrimPrefix(n.URL(), "redis://"); strings.Contains(string(r.Body), addr) {
				t.Errorf("%s: /readyz shows %s: %s", name, addr, r.Body)
			}
		}
	}
	r := gw.do(t, http.MethodGet, "/readyz", "", bearer(k.Key)...)
	wantStatus(t, r, http.StatusOK)
	var body struct{ Nodes []struct{ Addr string } }
	if err := json.Unmarshal(r.Body, &body); err != nil || len(body.Nodes) != len(nodes) {
		t.Errorf("with a valid key: %s (%v), want %d nodes", r.Body, err, len(nodes))
	}
}

// TestRetryAfterAfterWait: the 409 lock-held of an acquire that waited in
// vain tells the holder's remaining TTL at its end (plus jitter), not the
// TTL seen when the wait began; for a lock and for a semaphore's permit.
func TestRetryAfterAfterWait(t *testing.T) {
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes)
	const ttl, wait = 10000, 2500
	for _, path := range []string{"/locks/" + resourceName(t), "/semaphores/" + resourceName(t)} {
		limit := ""
		if strings.HasPrefix(path, "/semaphores/") {
			limit = `"limit":1,`
		}
		wantStatus(t, gw.do(t, http.MethodPost, path, fmt.Sprintf(`{%s"ttl_ms":%d}`, limit, ttl)), http.StatusCreated)
		r := gw.do(t, http.MethodPost, path, fmt.Sprintf(`{%s"wait_ms":%d}`, limit, wait))
		wantProblem(t, r, http.StatusConflict, "lock-held")
		// At most the remaining TTL plus 10% and 100 ms of jitter.
		if got, most := r.num(t, "retry_after_ms"), int64((ttl-wait)*11/10+100); got > most {
			t.Errorf("%s after a %d ms wait: retry_after_ms %d, want at most %d", path, wait, got, most)
		}
		if got := retryAfter(t, r); got > (ttl-wait)*11/10/1000+1 {
			t.Errorf("%s after a %d ms wait: Retry-After %d", path, wait, got)
		}
	}
}
