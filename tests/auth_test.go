package tests

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// apiKey is a key made by `redlockd keygen`.
type apiKey struct {
	Key, Entry, Name, Namespace string
}

// keygen runs `redlockd keygen` and returns its key and keys-file entry.
func keygen(t testing.TB, name, namespace string) apiKey {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	out, err := exec.Command(binPath, "keygen", "--name", name, "--namespace", namespace).Output()
	if err != nil {
		t.Fatalf("redlockd keygen: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("keygen printed %q, want 2 lines", out)
	}
	var e struct{ Name, Namespace, SHA256 string }
	if err := json.Unmarshal([]byte(lines[1]), &e); err != nil || e.Name != name || e.Namespace != namespace || len(e.SHA256) != 64 {
		t.Fatalf("keygen entry %q: %+v %v", lines[1], e, err)
	}
	if strings.Contains(lines[1], lines[0]) {
		t.Fatal("the keys-file entry holds the key itself")
	}
	return apiKey{Key: lines[0], Entry: lines[1], Name: name, Namespace: namespace}
}

// keysFile writes a keys file with the entries of keys and returns its path.
func keysFile(t testing.TB, keys ...apiKey) string {
	t.Helper()
	entries := make([]string, len(keys))
	for i, k := range keys {
		entries[i] = k.Entry
	}
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(`{"keys":[`+strings.Join(entries, ",")+"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// bearer returns the Authorization header pair of key.
func bearer(key string) []string { return []string{"Authorization", "Bearer " + key} }

// TestAuth: with an API keys file made by `redlockd keygen`, a missing or bad
// key gets 401 and touches nothing, a good key works, the same resource name
// under keys of two namespaces is two independent locks (in Redis too), a key
// cannot release or see another namespace's lock even with its token while
// another key of the same namespace can, /healthz, /readyz, /openapi.yaml and
// /metrics stay open, /metrics needs a key with --metrics-auth on, and the
// access log names the key, never the key itself (openapi.yaml
// info.description "Authentication and namespaces"; docs/operations.md
// "Security").
func TestAuth(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b := keygen(t, "svc-a", "team-a"), keygen(t, "svc-b", "team-b")
	a2 := keygen(t, "svc-a2", "team-a") // a second key of team a
	gw := startGateway(t, nodes, "--api-keys-file", keysFile(t, a, b, a2))
	res := resourceName(t)
	before := keySnapshot(t, nodes)

	for name, hdr := range map[string][]string{
		"no key":           nil,
		"unknown key":      bearer("not-a-key-0123456789abcdefghijkl"),
		"key's hash":       bearer(a.Entry[strings.Index(a.Entry, `"sha256":"`)+10 : len(a.Entry)-2]),
		"basic":            {"Authorization", "Basic " + a.Key},
		"key with a space": bearer(a.Key + " x"),
	} {
		for _, call := range []struct{ method, body string }{{"POST", `{"ttl_ms":5000}`}, {"GET", ""}, {"PATCH", ""}, {"DELETE", ""}} {
			h := append([]string{"Lock-Token", clientToken(t)}, hdr...)
			r := gw.do(t, call.method, "/locks/"+res, call.body, h...)
			wantProblem(t, r, http.StatusUnauthorized, "unauthorized")
			if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s, %s: WWW-Authenticate %q", name, call.method, r.Header.Get("WWW-Authenticate"))
			}
			wantNoSecret(t, r, a.Key)
		}
	}
	if after := keySnapshot(t, nodes); after != before {
		t.Fatalf("unauthorized requests changed Redis:\nbefore %s\nafter %s", before, after)
	}

	// Same name, two namespaces: two locks.
	ra := gw.do(t, http.MethodPost, "/locks/"+res, `{"ttl_ms":10000,"owner":"a"}`, bearer(a.Key)...)
	wantStatus(t, ra, http.StatusCreated)
	rb := gw.do(t, http.MethodPost, "/locks/"+res, `{"ttl_ms":10000,"owner":"b"}`, bearer(b.Key)...)
	wantStatus(t, rb, http.StatusCreated)
	tokA, tokB := ra.str(t, "token"), rb.str(t, "token")
	wantProblem(t, gw.do(t, http.MethodPost, "/locks/"+res, "", bearer(a2.Key)...), http.StatusConflict, "lock-held")
	if got := gw.do(t, http.MethodGet, "/locks/"+res, "", bearer(b.Key)...); got.Status != 200 || got.str(t, "owner") != "b" {
		t.Errorf("key b sees %s", got)
	}
	for i, n := range nodes {
		for ns, tok := range map[string]string{"team-a": tokA, "team-b": tokB} {
			if h := lockHolder(t, n.Client(), "redlockd:lock:"+ns+"/"+res); h != tok {
				t.Errorf("node %d: lock of %s held by %q", i, ns, h)
			}
		}
		if n, _ := n.Client().Exists(context.Background(), lockKey(res)).Result(); n != 0 {
			t.Errorf("node %d: a lock in the default namespace", i)
		}
	}
	// Key b cannot release team a's lock, even with its token.
	rel := gw.do(t, http.MethodDelete, "/locks/"+res, "", append(bearer(b.Key), "Lock-Token", tokA)...)
	wantProblem(t, rel, http.StatusConflict, "not-owner")
	wantStatus(t, gw.do(t, http.MethodGet, "/locks/"+res, "", bearer(a.Key)...), http.StatusOK)
	// Another key of the same namespace can.
	wantStatus(t, gw.do(t, http.MethodDelete, "/locks/"+res, "", append(bearer(a2.Key), "Lock-Token", tokA)...), http.StatusNoContent)
	wantStatus(t, gw.do(t, http.MethodDelete, "/locks/"+res, "", append(bearer(b.Key), "Lock-Token", tokB)...), http.StatusNoContent)

	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml", "/metrics"} {
		wantStatus(t, gw.do(t, http.MethodGet, path, ""), http.StatusOK)
	}

	gw2 := startGateway(t, nodes, "--api-keys-file", keysFile(t, a), "--metrics-auth", "on")
	wantProblem(t, gw2.do(t, http.MethodGet, "/metrics", ""), http.StatusUnauthorized, "unauthorized")
	wantStatus(t, gw2.do(t, http.MethodGet, "/metrics", "", bearer(a.Key)...), http.StatusOK)
	wantStatus(t, gw2.do(t, http.MethodGet, "/healthz", ""), http.StatusOK)

	gw.Stop()
	gw2.Stop()
	checkNoSecrets(t, gw.Stderr()+gw2.Stderr(), "stderr", a.Key, b.Key, a2.Key, tokA, tokB)
	if !strings.Contains(gw.Stderr(), `"key":"svc-b"`) {
		t.Error("the access log does not name the key")
	}
}

// TestAuthKeysFileErrors: a keys file that is missing, empty, holds a key
// instead of its hash or one entry twice stops start-up with exit 64 and a
// message that says why without quoting the key (docs/configuration.md
// "Configuration": --api-keys-file; docs/operations.md "Security").
func TestAuthKeysFileErrors(t *testing.T) {
	t.Parallel()
	a := keygen(t, "a", "a")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, tc := range map[string]struct{ file, want string }{
		"missing":        {filepath.Join(dir, "none.json"), "no such file"},
		"key not hashed": {write("k1", `{"keys":[{"name":"a","namespace":"a","sha256":"`+a.Key+`"}]}`), "sha256 must be 64 hex digits"},
		"duplicate":      {write("k2", `{"keys":[`+a.Entry+`,`+a.Entry+`]}`), "already key #1"},
		"empty":          {write("k3", `{"keys":[]}`), "no keys"},
	} {
		cmd := exec.Command(binPath, "serve", "--listen", "127.0.0.1:0", "--api-keys-file", tc.file)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 64 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %v, output %s", name, err, out)
		}
		if strings.Contains(string(out), a.Key) {
			t.Errorf("%s: the key is echoed: %s", name, out)
		}
	}
}

// TestReadyzNodesNeedKey: with --api-keys-file, /readyz needs no key (its
// status and quorum answer every caller; a missing or unknown key is no 401
// there) but lists the nodes only to a request with a valid key (openapi.yaml
// GET /readyz).
func TestReadyzNodesNeedKey(t *testing.T) {
	t.Parallel()
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

// TestKeygenDotNames: `redlockd keygen` (docs/configuration.md
// "Configuration": Subcommands) refuses "." and ".." as a name or namespace
// with exit 64, as the keys file does, and its message and help say so rather
// than claim the name is outside [A-Za-z0-9._:-].
func TestKeygenDotNames(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--name", "..", "--namespace", "ns"}, {"--name", "n", "--namespace", "."}} {
		out, err := exec.Command(binPath, append([]string{"keygen"}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 64 || !strings.Contains(string(out), `other than "." and ".."`) {
			t.Errorf("keygen %q: %v, %s", args, err, out)
		}
	}
	help, _ := exec.Command(binPath, "keygen", "--help").Output()
	if !strings.Contains(string(help), `other than "." and ".."`) {
		t.Errorf("keygen --help does not say that . and .. are refused:\n%s", help)
	}
}

// TestAuthEveryKindNeedsKey: with API keys, every route of every kind (lock,
// read lock, several resources, semaphore, and the listing) answers 401 to no
// key, a wrong key and a key given twice, and touches nothing in Redis
// (openapi.yaml info.description "Authentication and namespaces").
func TestAuthEveryKindNeedsKey(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a := keygen(t, "qa-a", "qa-a")
	gw := startGateway(t, nodes, "--api-keys-file", keysFile(t, a))
	before := keySnapshot(t, nodes)
	for _, k := range lockKinds {
		res := resourceName(t)
		calls := [][2]string{{http.MethodPost, k.acquireURL(res)}, {http.MethodGet, "/semaphores/" + res}, {http.MethodGet, "/locks/" + res},
			{http.MethodHead, "/locks?prefix=" + res}, {http.MethodPatch, k.url(res)}, {http.MethodDelete, k.url(res)}}
		for _, c := range calls {
			for _, hdr := range [][]string{nil, bearer(a.Key + "x"), {"Authorization", "Bearer " + a.Key + ", Bearer " + a.Key}} {
				r := gw.do(t, c[0], c[1], k.body(res, ""), append([]string{"Lock-Token", clientToken(t)}, hdr...)...)
				if r.Status != http.StatusUnauthorized {
					t.Errorf("%s %s, %s: %d, want 401", c[0], c[1], k.name, r.Status)
				}
				wantNoSecret(t, r, a.Key)
			}
		}
	}
	if after := keySnapshot(t, nodes); after != before {
		t.Fatalf("unauthenticated requests changed Redis:\nbefore %s\nafter %s", before, after)
	}
}
