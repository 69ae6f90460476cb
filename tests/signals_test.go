package tests

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPReload: SIGHUP makes a gateway with API keys and TLS reload its
// keys file and its certificate in place. A waiting acquire in flight
// completes, an idle keep-alive connection carries on, the new key works and
// the revoked one gets 401, and a new TLS handshake sees the new
// certificate. A bad keys file or certificate then keeps the old ones and
// is logged as an error, without key material (docs/configuration.md
// "Configuration", SIGHUP; docs/operations.md "Security").
func TestSIGHUPReload(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, "gateway-1")
	oldKey, newKey := keygen(t, "old", "team"), keygen(t, "new", "team")
	keys := keysFile(t, oldKey)
	g := startUnready(t, nodes, "--api-keys-file", keys, "--tls-cert", certFile, "--tls-key", keyFile)
	base := strings.Replace(g.URL, "http://", "https://", 1)
	host := strings.TrimPrefix(g.URL, "http://")
	tlsConf := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	newClient := func() *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf.Clone()}}
	}
	c := newClient()
	waitReadyWith(t, c, base, g)
	handshake := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", host, tlsConf.Clone())
		if err != nil {
			t.Fatalf("TLS handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := handshake(); cn != "gateway-1" {
		t.Fatalf("certificate %q, want gateway-1", cn)
	}

	// A lock held with the old key, and a waiter for it, in flight.
	res := resourceName(t)
	held := doWith(t, c, http.MethodPost, base+"/locks/"+res, `{"ttl_ms":30000}`, bearer(oldKey.Key)...)
	wantStatus(t, held, http.StatusCreated)
	waiter := make(chan *Resp, 1)
	go func() {
		req, _ := newRequest(base+"/locks/"+res, http.MethodPost, `{"ttl_ms":5000,"wait_ms":30000}`, bearer(oldKey.Key)...)
		r, err := sendWith(newClient(), req)
		if err != nil {
			r = &Resp{Body: []byte("error: " + err.Error())}
		}
		waiter <- r
	}()
	eventually(t, 10*time.Second, "the acquire waits", func() bool {
		return strings.Contains(string(doWith(t, c, http.MethodGet, base+"/metrics", "").Body), "\nredlockd_waiters 1\n")
	})

	// An idle keep-alive connection.
	idle := newClient()
	reused := func() bool {
		t.Helper()
		var got httptrace.GotConnInfo
		req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { got = i },
		}))
		r, err := sendWith(idle, req)
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("GET /healthz on the idle connection: %v %v", r, err)
		}
		return got.Reused
	}
	reused()

	// New keys (the old one revoked) and a new certificate, then SIGHUP.
	if err := os.WriteFile(keys, []byte(`{"keys":[`+newKey.Entry+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	newCert, newKeyFile := ca.issue(t, "gateway-2")
	copyFile(t, newCert, certFile)
	copyFile(t, newKeyFile, keyFile)
	hup(t, g)
	waitLog(t, g, "TLS certificate reloaded")
	line := waitLog(t, g, "API keys reloaded")
	if line["keys"] != float64(1) || line["level"] != "info" {
		t.Errorf("reload log line %v, want keys 1 at info", line)
	}

	if !reused() {
		t.Error("the idle keep-alive connection was not reused after SIGHUP")
	}
	if cn := handshake(); cn != "gateway-2" {
		t.Errorf("new handshake: certificate %q, want gateway-2", cn)
	}
	wantProblem(t, doWith(t, c, http.MethodGet, base+"/locks/"+res, "", bearer(oldKey.Key)...), http.StatusUnauthorized, "unauthorized")
	// The new key reaches the same namespace: it releases the lock, and
	// the waiter, authenticated before the reload, gets it.
	wantStatus(t, doWith(t, c, http.MethodDelete, base+"/locks/"+res, "", append(bearer(newKey.Key), "Lock-Token", held.str(t, "token"))...), http.StatusNoContent)
	select {
	case r := <-waiter:
		wantStatus(t, r, http.StatusCreated)
		wantStatus(t, doWith(t, c, http.MethodDelete, base+"/locks/"+res, "", append(bearer(newKey.Key), "Lock-Token", r.str(t, "token"))...), http.StatusNoContent)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting acquire did not complete")
	}

	// A bad keys file and a bad certificate: the old ones stay.
	if err := os.WriteFile(keys, []byte(`{"keys":[`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup(t, g)
	for _, msg := range []string{"API keys not reloaded: the previous keys stay in use", "TLS certificate not reloaded"} {
		l := waitLogPrefix(t, g, msg)
		if l["level"] != "error" || l["error"] == nil {
			t.Errorf("log line %v: want level error with the reason", l)
		}
	}
	if r := doWith(t, c, http.MethodGet, base+"/locks/"+res, "", bearer(newKey.Key)...); r.Status == http.StatusUnauthorized {
		t.Errorf("after a failed reload the new key gets %v", r)
	}
	wantProblem(t, doWith(t, c, http.MethodGet, base+"/locks/"+res, "", bearer(oldKey.Key)...), http.StatusUnauthorized, "unauthorized")
	if cn := handshake(); cn != "gateway-2" {
		t.Errorf("after a failed reload: certificate %q, want gateway-2", cn)
	}
	keyPEM, _ := os.ReadFile(newKeyFile)
	checkNoSecrets(t, g.Stderr(), "the gateway's log", oldKey.Key, newKey.Key, string(keyPEM))
	g.Stop() // alive, and exits 0 on SIGTERM
}

// hup sends SIGHUP to the gateway.
func hup(t *testing.T, g *Gateway) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP: %v", err)
	}
}

// copyFile copies the file src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// logLines returns the gateway's JSON log lines so far.
func logLines(g *Gateway) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(g.Stderr()))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// waitLog waits for the log line with message msg (its latest) and
// returns it.
func waitLog(t *testing.T, g *Gateway, msg string) map[string]any {
	t.Helper()
	return waitLogWhere(t, g, "a log line "+msg, func(l map[string]any) bool { return l["message"] == msg })
}

// waitLogPrefix waits for a log line whose message starts with prefix.
func waitLogPrefix(t *testing.T, g *Gateway, prefix string) map[string]any {
	t.Helper()
	return waitLogWhere(t, g, "a log line "+prefix+"…", func(l map[string]any) bool {
		m, _ := l["message"].(string)
		return strings.HasPrefix(m, prefix)
	})
}

// waitLogWhere waits for a log line for which match is true and returns
// the last such line.
func waitLogWhere(t *testing.T, g *Gateway, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	var found map[string]any
	eventually(t, 10*time.Second, what, func() bool {
		for _, l := range logLines(g) {
			if match(l) {
				found = l
			}
		}
		return found != nil
	})
	return found
}

// TestUnknownEnv: a REDLOCKD_* variable redlockd does not read is reported
// at start-up by name (never by value), with the known name it is close
// to. One that looks like a missing security setting (a misspelt
// REDLOCKD_API_KEYS_FILE would run without API keys) stops serve with 64;
// another is a warning. Variables of the other commands and the tests are
// not reported (docs/configuration.md "Configuration", Unknown variables).
func TestUnknownEnv(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	const value = "/etc/redlockd/value-not-shown.json"

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "serve", "--listen", "127.0.0.1:0", "--redis", redisURLs(nodes))
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.Env = append(cleanEnv(), "REDLOCKD_API_KEYS_FIEL="+value)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 64 {
		t.Fatalf("serve with REDLOCKD_API_KEYS_FIEL: %v, want exit 64:\n%s", err, out)
	}
	if !strings.Contains(string(out), "REDLOCKD_API_KEYS_FIEL") || !strings.Contains(string(out), "did you mean REDLOCKD_API_KEYS_FILE?") {
		t.Errorf("stderr does not name the variable and its likely meaning:\n%s", out)
	}
	if strings.Contains(string(out), value) {
		t.Errorf("stderr shows the variable's value:\n%s", out)
	}

	// With the keys file given, the same typo is a leftover: a warning.
	key := keygen(t, "k", "ns")
	g := startProcess(t, []string{
		"REDLOCKD_API_KEYS_FIEL=" + value,
		"REDLOCKD_MAX_WAITER=5",     // a typo: a warning
		"REDLOCKD_SOMETHING_ELSE=x", // unknown, close to nothing
		// Read by run, set by run for its command, read by the tests.
		"REDLOCKD_API_KEY=" + key.Key, "REDLOCKD_URL=http://x", "REDLOCKD_TOKEN=t", "REDLOCKD_SOAK_SEED=1", "REDLOCKD_TESTS_X=x",
	}, "serve", "--listen", "127.0.0.1:0", "--restart-quarantine", "off", "--redis", redisURLs(nodes),
		"--api-keys-file", keysFile(t, key))
	g.waitReady(t)
	want := map[string]string{
		"REDLOCKD_API_KEYS_FIEL":  "REDLOCKD_API_KEYS_FILE",
		"REDLOCKD_MAX_WAITER":     "REDLOCKD_MAX_WAITERS",
		"REDLOCKD_SOMETHING_ELSE": "",
	}
	for _, l := range logLines(g) {
		v, ok := l["variable"].(string)
		if !ok {
			continue
		}
		sug, wanted := want[v]
		switch {
		case !wanted:
			t.Errorf("variable %s reported: %v", v, l)
		case l["level"] != "warn" || (l["did_you_mean"] != nil && l["did_you_mean"] != sug) || (l["did_you_mean"] == nil && sug != ""):
			t.Errorf("variable %s: log line %v, want a warning suggesting %q", v, l, sug)
		}
		delete(want, v)
	}
	for v := range want {
		t.Errorf("variable %s not reported", v)
	}
	checkNoSecrets(t, g.Stderr(), "the gateway's log", value, key.Key)
}

// TestRunAPIKeyEnv: `redlockd run` takes its API key from REDLOCKD_API_KEY;
// --api-key-file wins over it, and it wins over REDLOCKD_API_KEY_FILE. The
// key shows nowhere (docs/clients.md "`redlockd run` (shell scripts, cron
// jobs)").
func TestRunAPIKeyEnv(t *testing.T) {
	t.Parallel()
	key := keygen(t, "ci", "ci")
	g := startGateway(t, startCluster(t, 3), "--api-keys-file", keysFile(t, key))
	wrong := t.TempDir() + "/wrong-key"
	if err := os.WriteFile(wrong, []byte("not-the-key-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, args ...string) *proc {
		t.Helper()
		res := resourceName(t)
		return runProc(t, env, append(append([]string{"run", "--url", g.URL, "--resource", res}, args...), "--", "sh", "-c", "echo ran")...)
	}
	env := []string{"REDLOCKD_API_KEY=" + key.Key}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want int
	}{
		{"env", env, nil, 0},
		{"env over REDLOCKD_API_KEY_FILE", append(env, "REDLOCKD_API_KEY_FILE="+wrong), nil, 0},
		{"flag over env", env, []string{"--api-key-file", wrong}, 64},
		{"none", nil, nil, 64},
	} {
		p := run(tc.env, tc.args...)
		if got := p.wait(30 * time.Second); got != tc.want {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", tc.name, got, tc.want, p.errs.String())
		}
		checkNoSecrets(t, p.out.String()+p.errs.String(), "run's output", key.Key)
	}
}

// TestClientGoneLogged: a waiting acquire whose client goes away (at the
// head of the queue, and behind it) is logged with outcome client_gone and
// status 499 at info level, with no node errors and no "quorum
// unavailable" line, and counted as such; so is an acquire whose client
// goes away while the nodes do not answer yet (docs/configuration.md
// "Configuration", the last paragraph; docs/operations.md "Logs").
func TestClientGoneLogged(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	g := startGateway(t, nodes, "--node-timeout", "5s")
	res := resourceName(t)
	held := acquire(t, g, res, `{"ttl_ms":30000}`)
	wantStatus(t, held, http.StatusCreated)

	ids := []string{"client-gone-head", "client-gone-behind"}
	var cancels []context.CancelFunc
	for i, id := range ids {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		req, err := newRequest(g.URL+"/locks/"+res, http.MethodPost, `{"wait_ms":30000}`, "X-Request-Id", id)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = (&http.Client{Transport: &http.Transport{}}).Do(req.WithContext(ctx)) }()
		eventually(t, 10*time.Second, "the acquire waits", func() bool {
			return strings.Contains(string(g.do(t, http.MethodGet, "/metrics", "").Body), "\nredlockd_waiters "+string(rune('1'+i))+"\n")
		})
	}
	for _, cancel := range cancels {
		cancel()
	}
	for _, id := range ids {
		l := waitLogWhere(t, g, "the access log line of "+id, func(l map[string]any) bool {
			return l["req_id"] == id && l["message"] == "request"
		})
		if l["outcome"] != "client_gone" || l["status"] != float64(499) || l["level"] != "info" {
			t.Errorf("%s: access log %v, want outcome client_gone, status 499, level info", id, l)
		}
	}
	for _, l := range logLines(g) {
		if id, _ := l["req_id"].(string); strings.HasPrefix(id, "client-gone-") && l["message"] != "request" {
			t.Errorf("%s: a line besides the access log: %v", id, l)
		}
	}
	if s := g.Stderr(); strings.Contains(s, "context canceled") {
		t.Errorf("the log shows node errors of the gone clients:\n%s", tail(s, 20))
	}
	m := string(g.do(t, http.MethodGet, "/metrics", "").Body)
	if !strings.Contains(m, `redlockd_acquisitions_total{outcome="client_gone"} 2`) {
		t.Errorf("metrics do not count 2 client_gone acquisitions:\n%s", grepLines(m, "redlockd_acquisitions_total"))
	}
	if strings.Contains(m, "redlockd_node_command_errors_total{") {
		t.Errorf("node errors counted:\n%s", grepLines(m, "redlockd_node_command_errors_total"))
	}
	wantStatus(t, release(t, g, res, held.str(t, "token")), http.StatusNoContent)

	// An acquire in a round that waits for silent nodes (no quorum
	// without them): its client goes away well before the node timeout.
	nodes[0].Pause()
	nodes[1].Pause()
	defer nodes[1].Resume()
	defer nodes[0].Resume()
	const id = "client-gone-round"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wrote := make(chan struct{})
	req, err := newRequest(g.URL+"/locks/"+resourceName(t), http.MethodPost, "", "X-Request-Id", id)
	if err != nil {
		t.Fatal(err)
	}
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) },
	}))
	go func() { _, _ = (&http.Client{Transport: &http.Transport{}}).Do(req) }()
	<-wrote
	time.Sleep(200 * time.Millisecond) // into the round, which lasts the 5s node timeout
	cancel()
	l := waitLogWhere(t, g, "the access log line of "+id, func(l map[string]any) bool {
		return l["req_id"] == id && l["message"] == "request"
	})
	if l["outcome"] != "client_gone" || l["status"] != float64(499) || l["level"] != "info" {
		t.Errorf("%s: access log %v, want outcome client_gone, status 499, level info", id, l)
	}
	for _, l := range logLines(g) {
		if l["req_id"] == id && l["message"] != "request" {
			t.Errorf("%s: a line besides the access log: %v", id, l)
		}
	}
	if s := g.Stderr(); strings.Contains(s, "context canceled") {
		t.Errorf("the log shows node errors of the gone client:\n%s", tail(s, 20))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
