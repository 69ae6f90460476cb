package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLogs checks the access log: one JSON line per request carrying its
// request id, and no token ever, whether the gateway or the client chose it.
func TestLogs(t *testing.T) {
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes)

	var (
		tokens []string
		resps  []*Resp
	)
	rec := func(r *Resp) *Resp { resps = append(resps, r); return r }

	res := resourceName(t)
	a := rec(lock(t, gw, res, `{"ttl_ms":5000,"owner":"logs-test"}`))
	tok := a.str(t, "token")
	tokens = append(tokens, tok)
	rec(acquire(t, gw, res, ""))                                                         // 409
	rec(inspect(t, gw, res))                                                             // 200
	rec(extend(t, gw, res, tok, `{"ttl_ms":5000}`))                                      // 200
	rec(release(t, gw, res, clientToken(t)))                                             // 409 held-by-other
	rec(gw.do(t, http.MethodDelete, "/locks/"+res+"?token="+tok, ""))                    // 400
	rec(release(t, gw, res, tok))                                                        // 204
	rec(release(t, gw, res, tok))                                                        // 409 expired
	rec(gw.do(t, http.MethodPatch, "/locks/"+res, `{"ttl_ms":5000}`, "Lock-Token", tok)) // 409

	ctok := clientToken(t)
	tokens = append(tokens, ctok)
	res2 := resourceName(t)
	rec(lock(t, gw, res2, fmt.Sprintf(`{"token":%q}`, ctok)))
	rec(lock(t, gw, res2, fmt.Sprintf(`{"token":%q}`, ctok)))
	rec(acquire(t, gw, res2, fmt.Sprintf(`{"token":%q,"bogus":1}`, ctok))) // 400 with a token in the body
	rec(release(t, gw, res2, ctok))
	rec(gw.do(t, http.MethodGet, "/nope", ""))
	rec(gw.do(t, http.MethodGet, "/healthz", ""))

	// A hostile incoming request id cannot forge or break log lines.
	rec(gw.do(t, http.MethodGet, "/healthz", "", "X-Request-Id", `x","level":"error","message":"forged`))
	rec(gw.do(t, http.MethodGet, "/healthz", "", "X-Request-Id", strings.Repeat("r", 4096)))

	gw.Stop() // flushes and closes stderr
	logs := gw.Stderr()
	for _, tk := range tokens {
		if strings.Contains(logs, tk) {
			t.Errorf("token %s… appears in the logs", tk[:8])
		}
	}

	lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("log line %d is not JSON: %q", i+1, l)
		}
		if m["message"] == "forged" {
			t.Errorf("log line %d was forged by a request id: %s", i+1, l)
		}
	}
	// The access line of a request is the one with its id and a status;
	// other lines (warnings) may carry the id too.
	for _, r := range resps {
		id := r.Header.Get("X-Request-Id")
		if id == "" {
			continue // reported by do()
		}
		var access []map[string]any
		for _, l := range lines {
			var m map[string]any
			if !strings.Contains(l, `"`+id+`"`) || json.Unmarshal([]byte(l), &m) != nil {
				continue
			}
			if _, ok := m["status"]; ok {
				access = append(access, m)
			}
		}
		if len(access) != 1 {
			t.Errorf("%s %s (%d, request id %s): %d access log lines, want 1", r.Method, r.Path, r.Status, id, len(access))
			continue
		}
		if got, _ := access[0]["status"].(float64); got != float64(r.Status) {
			t.Errorf("access log of %s %s: status %v, want %d", r.Method, r.Path, access[0]["status"], r.Status)
		}
		if got, _ := access[0]["method"].(string); got != r.Method {
			t.Errorf("access log of %s %s: method %v, want %s", r.Method, r.Path, access[0]["method"], r.Method)
		}
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", tail(logs, 60))
	}
}

// TestSecretsHidden runs the gateway against password-protected nodes and
// checks that neither the password nor tokens show in /readyz, problem
// bodies or logs.
func TestSecretsHidden(t *testing.T) {
	const password = "pw-Zq8sVb3nLk2xYt"
	nodes := startClusterPassword(t, 5, password)
	gw := startGateway(t, nodes)

	res := resourceName(t)
	tok := lock(t, gw, res, "").str(t, "token")
	r := gw.do(t, http.MethodGet, "/readyz", "")
	wantStatus(t, r, http.StatusOK)
	checkReadyNodes(t, r, nodes, nil)
	for _, resp := range []*Resp{r, acquire(t, gw, res, ""), inspect(t, gw, res)} {
		wantNoSecret(t, resp, password)
		wantNoSecret(t, resp, tok)
	}
	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)

	// A node with a wrong password is down, and the error says nothing of it.
	bad := startRedisPassword(t, "another-password-1")
	bad.Password = "wrong-password-Xy7"
	gw2 := startGateway(t, append(nodes[:4:4], bad))
	var r2 *Resp
	eventually(t, 10*time.Second, "/readyz shows the node with a wrong password down", func() bool {
		r2 = gw2.do(t, http.MethodGet, "/readyz", "")
		return countUp(r2) == 4
	})
	wantNoSecret(t, r2, "wrong-password-Xy7")
	wantNoSecret(t, r2, password)

	gw.Stop()
	gw2.Stop()
	for _, s := range []string{password, "wrong-password-Xy7", tok} {
		if strings.Contains(gw.Stderr()+gw2.Stderr(), s) {
			t.Errorf("secret %s… appears in the logs", s[:6])
		}
	}
}

// TestShutdown checks SIGTERM: a request blocked in wait_ms gets a 503
// problem, not a cut connection, and the process exits 0 promptly.
func TestShutdown(t *testing.T) {
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes)
	res := resourceName(t)
	lock(t, gw, res, `{"ttl_ms":30000}`)

	type result struct {
		r   *Resp
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		r, err := gw.try(http.MethodPost, "/locks/"+res, `{"wait_ms":20000}`)
		waiter <- result{r, err}
	}()
	// No event says the waiter reached the gateway; give it ample time.
	time.Sleep(300 * time.Millisecond)

	start := time.Now()
	gw.Stop()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown with a waiter took %v", d)
	}
	select {
	case w := <-waiter:
		if w.err != nil {
			t.Fatalf("waiter: %v (want a 503 response, not a cut connection)", w.err)
		}
		wantProblem(t, w.r, http.StatusServiceUnavailable, "shutting-down")
	case <-time.After(5 * time.Second):
		t.Fatal("waiter got no answer within 5 s of the gateway exiting")
	}
}
