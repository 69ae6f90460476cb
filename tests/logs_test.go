package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLogs: the access log has one JSON line per request carrying its request
// id, remote address and user agent, the fencing token on the answers of a
// lock (acquired, extended, held), and never a lock token, whether the
// gateway or the client chose it (docs/operations.md "Logs").
func TestLogs(t *testing.T) {
	t.Parallel()
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
	rec(acquire(t, gw, res, ""))                                                            // 409
	held := rec(gw.do(t, http.MethodGet, "/locks/"+res, "", "User-Agent", "logs-test/1.0")) // 200 held
	rec(extend(t, gw, res, tok, `{"ttl_ms":5000}`))                                         // 200
	rec(release(t, gw, res, clientToken(t)))                                                // 409 held-by-other
	rec(gw.do(t, http.MethodDelete, "/locks/"+res+"?token="+tok, ""))                       // 400
	rec(release(t, gw, res, tok))                                                           // 204
	rec(release(t, gw, res, tok))                                                           // 409 expired
	rec(gw.do(t, http.MethodPatch, "/locks/"+res, `{"ttl_ms":5000}`, "Lock-Token", tok))    // 409

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
		if got, _ := access[0]["remote_addr"].(string); !strings.HasPrefix(got, "127.0.0.1:") {
			t.Errorf("access log of %s %s: remote_addr %q, want 127.0.0.1:port", r.Method, r.Path, got)
		}
		want := "Go-http-client/1.1" // Go's client's own
		if r == held {
			want = "logs-test/1.0"
		}
		if got := access[0]["user_agent"]; got != want {
			t.Errorf("access log of %s %s: user_agent %v, want %s", r.Method, r.Path, got, want)
		}
		// Every 201 and 200 on /locks carries a fencing token, and its
		// access line the same; no other line has one.
		fence, isLock := r.JSON["fencing_token"].(json.Number)
		got, logged := access[0]["fencing_token"].(float64)
		if isLock != logged || isLock != (r.Status == http.StatusCreated || r.Status == http.StatusOK && strings.HasPrefix(r.Path, "/locks/")) ||
			logged && fmt.Sprint(int64(got)) != fence.String() {
			t.Errorf("access log of %s %s (%d): fencing_token %v, response's %v", r.Method, r.Path, r.Status, access[0]["fencing_token"], r.JSON["fencing_token"])
		}
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", tail(logs, 60))
	}
}

// TestSecretsHidden: API keys, lock tokens and Redis passwords never show in
// a response body or header, /readyz, /metrics or anything the process
// prints, even at debug level: the gateway runs with an API keys file against
// password-protected nodes, and every endpoint is called with every kind of
// answer (created, held, invalid, unauthorized with a wrong key, not owner,
// released, free, not found, method not allowed, too large) carrying a
// recognisable key, tokens and password (docs/operations.md "Security";
// openapi.yaml info.description "Conventions").
func TestSecretsHidden(t *testing.T) {
	t.Parallel()
	const password = "pw-Zq8sVb3nLk2xYt"
	const wrongKey = "wrong-key-Hj4kLm9pQr2sTv6wXy"
	nodes := startClusterPassword(t, 5, password)
	k := keygen(t, "secrets", "secrets")
	gw := startGateway(t, nodes, "--api-keys-file", keysFile(t, k), "--log-level", "debug")
	auth := bearer(k.Key)
	with := func(hdr ...string) []string { return append(append([]string{}, auth...), hdr...) }

	res := resourceName(t)
	ctok := clientToken(t)
	var resps []*Resp
	rec := func(r *Resp) *Resp { resps = append(resps, r); return r }

	a := rec(gw.do(t, http.MethodPost, "/locks/"+res, fmt.Sprintf(`{"ttl_ms":10000,"token":%q}`, ctok), auth...))
	wantStatus(t, a, http.StatusCreated)
	rec(gw.do(t, http.MethodPost, "/locks/"+res, fmt.Sprintf(`{"token":%q}`, ctok), auth...))                    // 201 again
	wantProblem(t, rec(gw.do(t, http.MethodPost, "/locks/"+res, "", auth...)), http.StatusConflict, "lock-held") // held
	wantProblem(t, rec(gw.do(t, http.MethodPost, "/locks/"+res, fmt.Sprintf(`{"token":%q,"x":1}`, ctok), auth...)), 400, "invalid-request")
	wantProblem(t, rec(gw.do(t, http.MethodPost, "/locks/"+res, "", bearer(wrongKey)...)), 401, "unauthorized")
	wantProblem(t, rec(gw.do(t, http.MethodDelete, "/locks/"+res, "", append(bearer(wrongKey), "Lock-Token", ctok)...)), 401, "unauthorized")
	wantProblem(t, rec(gw.do(t, http.MethodGet, "/locks/"+res, "", "Authorization", wrongKey)), 401, "unauthorized")
	wantStatus(t, rec(gw.do(t, http.MethodGet, "/locks/"+res, "", auth...)), http.StatusOK)
	wantStatus(t, rec(gw.do(t, http.MethodPatch, "/locks/"+res, `{"ttl_ms":10000}`, with("Lock-Token", ctok)...)), http.StatusOK)
	wantProblem(t, rec(gw.do(t, http.MethodPatch, "/locks/"+res, "", with("Lock-Token", clientToken(t))...)), 409, "not-owner")
	wantProblem(t, rec(gw.do(t, http.MethodDelete, "/locks/"+res, "", with("Lock-Token", ctok+"!")...)), 400, "invalid-request")
	wantProblem(t, rec(gw.do(t, http.MethodPut, "/locks/"+res, "", with("Lock-Token", ctok)...)), 405, "method-not-allowed")
	wantProblem(t, rec(gw.do(t, http.MethodPost, "/locks/"+res, `{"token":"`+ctok+`","owner":"`+strings.Repeat("o", 17<<10)+`"}`, auth...)), 413, "payload-too-large")
	wantStatus(t, rec(gw.do(t, http.MethodDelete, "/locks/"+res, "", with("Lock-Token", ctok)...)), http.StatusNoContent)
	wantStatus(t, rec(gw.do(t, http.MethodDelete, "/locks/"+res, "", with("Lock-Token", ctok)...)), http.StatusNoContent) // retried: idempotent
	wantProblem(t, rec(gw.do(t, http.MethodPatch, "/locks/"+res, "", with("Lock-Token", ctok)...)), 409, "not-owner")
	wantNotHeld(t, rec(gw.do(t, http.MethodGet, "/locks/"+res, "", auth...)))
	gtok := rec(gw.do(t, http.MethodPost, "/locks/"+res, "", auth...)).str(t, "token") // a gateway-made token
	wantStatus(t, rec(gw.do(t, http.MethodDelete, "/locks/"+res, "", with("Lock-Token", gtok)...)), http.StatusNoContent)
	wantProblem(t, rec(gw.do(t, http.MethodGet, "/nope?key="+k.Key, "", auth...)), 404, "not-found")
	for _, path := range []string{"/healthz", "/openapi.yaml", "/metrics"} {
		wantStatus(t, rec(gw.do(t, http.MethodGet, path, "", auth...)), http.StatusOK)
	}
	r := rec(gw.do(t, http.MethodGet, "/readyz", "", auth...))
	wantStatus(t, r, http.StatusOK)
	checkReadyNodes(t, r, nodes, nil)

	for _, resp := range resps {
		secrets := []string{password, k.Key, wrongKey}
		if !(resp.Status == http.StatusCreated || (resp.Method == http.MethodPatch && resp.Status == http.StatusOK)) {
			secrets = append(secrets, ctok, gtok) // only the holder's own acquire and extend answers carry its token
		}
		for _, secret := range secrets {
			wantNoSecret(t, resp, secret)
		}
	}

	// A node with a wrong password is down, and the error says nothing of it.
	bad := startRedisPassword(t, "another-password-1")
	bad.Password = "wrong-password-Xy7"
	gw2 := startGateway(t, append(nodes[:4:4], bad), "--log-level", "debug")
	var r2 *Resp
	eventually(t, 10*time.Second, "/readyz shows the node with a wrong password down", func() bool {
		r2 = gw2.do(t, http.MethodGet, "/readyz", "")
		return countUp(r2) == 4
	})
	lock(t, gw2, resourceName(t), "")
	m2 := gw2.do(t, http.MethodGet, "/metrics", "")
	for _, resp := range []*Resp{r2, m2} {
		wantNoSecret(t, resp, "wrong-password-Xy7")
		wantNoSecret(t, resp, "another-password-1")
		wantNoSecret(t, resp, password)
	}

	gw.Stop()
	gw2.Stop()
	logs := gw.Stderr() + gw2.Stderr()
	for _, s := range []string{password, "wrong-password-Xy7", k.Key, wrongKey, ctok, gtok} {
		if strings.Contains(logs, s) {
			t.Errorf("secret %s… appears in the logs", s[:6])
		}
	}
	if !strings.Contains(logs, `"level":"debug"`) && !strings.Contains(logs, `"status":401`) {
		t.Errorf("the logs look empty:\n%s", tail(logs, 20))
	}
}

// TestShutdown: on SIGTERM, a request waiting with wait_ms gets a 503
// shutting-down problem, not a cut connection, and the process exits 0
// promptly (docs/operations.md "Restarts": gateways; openapi.yaml
// info.description "Behaviour where the specification is silent").
func TestShutdown(t *testing.T) {
	t.Parallel()
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
	eventually(t, 10*time.Second, "the waiter to wait", func() bool { return scrapeMetrics(t, gw).value("redlockd_waiters") == 1 })

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

// TestLogsUnready: /readyz answering 503 probe after probe is logged at info
// level, with one warning when it turns unready and one info line when it is
// ready again (docs/operations.md "Logs": readiness is logged by change).
func TestLogsUnready(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes, "--node-timeout", nodeTimeout.String())
	nodes[0].Kill()
	nodes[1].Kill()
	eventually(t, 10*time.Second, "/readyz 503", func() bool {
		return gw.do(t, http.MethodGet, "/readyz", "").Status == http.StatusServiceUnavailable
	})
	for range 3 {
		wantStatus(t, gw.do(t, http.MethodGet, "/readyz", ""), http.StatusServiceUnavailable)
	}
	nodes[0].Restart()
	nodes[1].Restart()
	eventually(t, 10*time.Second, "/readyz 200", func() bool {
		return gw.do(t, http.MethodGet, "/readyz", "").Status == http.StatusOK
	})

	gw.Stop()
	logs := gw.Stderr()
	var unready, changes []string
	for l := range strings.Lines(logs) {
		var m struct{ Level, Message, Route string }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		switch {
		case m.Level == "error":
			t.Errorf("error line: %s", l)
		case m.Route == "/readyz" && strings.Contains(l, `"status":503,`):
			unready = append(unready, m.Level)
		case strings.HasPrefix(m.Message, "ready:") || strings.HasPrefix(m.Message, "unready:"):
			changes = append(changes, m.Level+" "+m.Message[:strings.Index(m.Message, ":")])
		}
	}
	if len(unready) < 4 || slices.ContainsFunc(unready, func(l string) bool { return l != "info" }) {
		t.Errorf("access lines of /readyz 503: levels %v, want at least 4, all info", unready)
	}
	if got := strings.Join(changes, ", "); got != "warn unready, info ready" {
		t.Errorf("readiness changes logged: %q, want %q", got, "warn unready, info ready")
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", tail(logs, 40))
	}
}

// TestLogsKeptOnShutdown: log lines are written in batches, off the
// requests, yet a clean shutdown (SIGTERM) writes every one before the
// process exits: each of many concurrent requests has its access line, and
// the last line is the one logged just before exiting; /metrics counts the
// lines dropped under overload, none here (docs/operations.md "Logs").
func TestLogsKeptOnShutdown(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes)
	const workers, cycles = 8, 100
	ua := "logs-kept/" + resourceName(t)
	var answered atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		res := fmt.Sprintf("%s-%d", resourceName(t), w)
		wg.Go(func() { errs <- cycleLogged(gw, res, ua, cycles, &answered) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if dropped, ok := scrapeMetrics(t, gw).get("redlockd_log_lines_dropped_total"); !ok || dropped != 0 {
		t.Errorf("redlockd_log_lines_dropped_total = %v (present: %v), want 0", dropped, ok)
	}

	gw.Stop()
	logs := logLines(gw)
	lines := 0
	for _, l := range logs {
		if l["message"] == "request" && l["user_agent"] == ua {
			lines++
		}
	}
	if want := int(answered.Load()); lines != want {
		t.Errorf("%d access lines after SIGTERM, want one per request: %d", lines, want)
	}
	if last := logs[len(logs)-1]; last["message"] != "stopped" {
		t.Errorf("the last line is %v, want the one logged last before exiting: stopped", last)
	}
}

// cycleLogged acquires and releases res cycles times with User-Agent ua,
// counting the answers.
func cycleLogged(gw *Gateway, res, ua string, cycles int, answered *atomic.Int64) error {
	for range cycles {
		r, err := gw.try(http.MethodPost, "/locks/"+res, `{"ttl_ms":10000}`, "User-Agent", ua)
		if err != nil {
			return err
		}
		answered.Add(1)
		tok, _ := r.JSON["token"].(string)
		if r.Status != http.StatusCreated || tok == "" {
			return fmt.Errorf("acquire: %v", r)
		}
		if _, err := gw.try(http.MethodDelete, "/locks/"+res, "", "Lock-Token", tok, "User-Agent", ua); err != nil {
			return err
		}
		answered.Add(1)
	}
	return nil
}
