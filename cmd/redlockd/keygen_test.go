package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/server"
)

// keygen runs `redlockd keygen` and returns the key and the entry line.
func keygen(t *testing.T, name, namespace string) (key, entry string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"keygen", "--name", name, "--namespace", namespace}, &stdout, &stderr, env(nil)); code != exitOK {
		t.Fatalf("keygen: exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("keygen printed %d lines, want 2: %q", len(lines), stdout.String())
	}
	return lines[0], lines[1]
}

// writeKeysFile writes a keys file holding entries and returns its path.
func writeKeysFile(t *testing.T, entries ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(`{"keys":[`+strings.Join(entries, ",\n")+"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestKeygen(t *testing.T) {
	key, entry := keygen(t, "ci", "team-a")
	raw, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil || len(raw) != apiKeyBytes {
		t.Fatalf("key %q: %d bytes, %v; want %d bytes of base64url", key, len(raw), err, apiKeyBytes)
	}
	var e server.APIKey
	dec := json.NewDecoder(strings.NewReader(entry))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("entry %q: %v", entry, err)
	}
	if e.Name != "ci" || e.Namespace != "team-a" || e.SHA256 != server.HashKey(key) || strings.Contains(entry, key) {
		t.Fatalf("entry %+v for key %q", e, key)
	}
	keys, err := server.ParseKeys([]byte(`{"keys":[` + entry + `]}`))
	if err != nil || keys.Len() != 1 {
		t.Fatalf("the entry does not make a keys file: %v", err)
	}
	if key2, _ := keygen(t, "ci", "team-a"); key2 == key {
		t.Fatal("two keys alike")
	}

	for _, args := range [][]string{
		{"keygen", "--name", "ci"},
		{"keygen", "--namespace", "x"},
		{"keygen", "--name", "a/b", "--namespace", "x"},
		{"keygen", "--name", "a", "--namespace", "x", "extra"},
		{"keygen", "--bogus"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), args, &stdout, &stderr, env(nil)); code != exitUsage || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q; want %d and nothing", args, code, stdout.String(), exitUsage)
		}
	}
}

func TestMainAPIKeys(t *testing.T) {
	keyA, entryA := keygen(t, "a", "ns-a")
	keyB, entryB := keygen(t, "b", "ns-b")
	m, logs := openDevMain(t, func(c *Config) {
		c.APIKeysFile = writeKeysFile(t, entryA, entryB)
		c.MetricsAuth = true
		c.Listen = "0.0.0.0:0"
	})
	if strings.Contains(logs.String(), "without API keys") {
		t.Errorf("warned about a listener without API keys although it has keys:\n%s", logs)
	}
	if l := logs.find(t, "API keys loaded: every /locks and /semaphores request needs Authorization: Bearer <key>"); l == nil || l["keys"] != 2.0 {
		t.Errorf("no line saying 2 keys were loaded:\n%s", logs)
	}
	port := m.Addr()[strings.LastIndex(m.Addr(), ":"):]
	base := "http://127.0.0.1" + port
	do := func(method, path, key string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path, key string
		want              int
	}{
		{"POST", "/locks/job", "", 401},
		{"POST", "/locks/job", "wrong", 401},
		{"POST", "/locks/job", keyA, 201},
		{"POST", "/locks/job", keyB, 201}, // another namespace: another lock
		{"POST", "/locks/job", keyA, 409},
		{"GET", "/metrics", "", 401},
		{"GET", "/metrics", keyB, 200},
		{"GET", "/healthz", "", 200},
		{"GET", "/readyz", "", 200},
	} {
		if got := do(tc.method, tc.path, tc.key); got != tc.want {
			t.Errorf("%s %s with key %.4q: %d, want %d", tc.method, tc.path, tc.key, got, tc.want)
		}
	}
	for _, k := range []string{keyA, keyB} {
		if strings.Contains(logs.String(), k) {
			t.Errorf("key %.6s… in the logs", k)
		}
	}

	for name, file := range map[string]string{
		"missing":     "/nonexistent/keys.json",
		"not JSON":    writeKeysFile(t, "nope"),
		"no keys":     writeKeysFile(t),
		"bad hash":    writeKeysFile(t, `{"name":"a","namespace":"a","sha256":"`+keyA+`"}`),
		"bad name":    writeKeysFile(t, `{"name":"a b","namespace":"a","sha256":"`+server.HashKey("k")+`"}`),
		"duplicate":   writeKeysFile(t, entryA, entryA),
		"unknown key": writeKeysFile(t, `{"name":"a","namespace":"a","sha256":"`+server.HashKey("k")+`","key":"k"}`),
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), []string{"--listen", "127.0.0.1:0", "--api-keys-file", file}, &stdout, &stderr, env(nil))
		if code != exitUsage || !strings.Contains(stderr.String(), "--api-keys-file") {
			t.Errorf("%s: exit %d, want %d; stderr %s", name, code, exitUsage, stderr.String())
		}
		if strings.Contains(stderr.String(), keyA) {
			t.Errorf("%s: the key is echoed: %s", name, stderr.String())
		}
	}
}

func TestMainHTTPLimits(t *testing.T) {
	m, _ := openDevMain(t, func(c *Config) {
		c.ReadHeaderTimeout = 3 * time.Second
		c.IdleTimeout = 90 * time.Second
		c.MaxWait = 20 * time.Second
	})
	h := m.http
	if h.ReadHeaderTimeout != 3*time.Second || h.ReadTimeout != 3*time.Second+bodyReadTimeout {
		t.Errorf("read timeouts %v, %v", h.ReadHeaderTimeout, h.ReadTimeout)
	}
	if h.IdleTimeout != 90*time.Second {
		t.Errorf("idle timeout %v", h.IdleTimeout)
	}
	if h.WriteTimeout <= 20*time.Second {
		t.Errorf("write timeout %v is not above max wait", h.WriteTimeout)
	}
	if h.MaxHeaderBytes != server.MaxHeaderBytes {
		t.Errorf("max header bytes %d", h.MaxHeaderBytes)
	}
}

func TestProbe(t *testing.T) {
	m, _ := openDevMain(t, nil)
	probe := func(envm map[string]string, args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"probe"}, args...), &stdout, &stderr, env(envm))
		return code, stderr.String()
	}
	if code, stderr := probe(nil, "--url", "http://"+m.Addr()+"/healthz"); code != exitOK {
		t.Errorf("probe /healthz: exit %d: %s", code, stderr)
	}
	if code, stderr := probe(nil, "--url", "http://"+m.Addr()+"/nope"); code != exitFailure || !strings.Contains(stderr, "404") {
		t.Errorf("probe /nope: exit %d: %s", code, stderr)
	}
	// Without --url: the port of REDLOCKD_LISTEN, on loopback.
	port := m.Addr()[strings.LastIndex(m.Addr(), ":")+1:]
	if code, stderr := probe(map[string]string{"REDLOCKD_LISTEN": "0.0.0.0:" + port}); code != exitOK {
		t.Errorf("probe from REDLOCKD_LISTEN: exit %d: %s", code, stderr)
	}
	if code, _ := probe(map[string]string{"REDLOCKD_LISTEN": "127.0.0.1:0"}); code != exitUsage {
		t.Errorf("probe from port 0: exit %d, want %d", code, exitUsage)
	}
	// A closed port is unhealthy, quickly.
	start := time.Now()
	if code, _ := probe(nil, "--url", closedURL(t), "--timeout", "1s"); code != exitFailure || time.Since(start) > 5*time.Second {
		t.Errorf("probe of a closed port: exit %d after %v", code, time.Since(start))
	}

	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDLOCKD_LISTEN": ":9000"}, "http://127.0.0.1:9000/healthz"},
		{map[string]string{"REDLOCKD_LISTEN": "[::]:9000"}, "http://[::1]:9000/healthz"},
		{map[string]string{"REDLOCKD_LISTEN": "10.1.2.3:9000", "REDLOCKD_TLS_CERT": "c"}, "https://10.1.2.3:9000/healthz"},
		{nil, "http://127.0.0.1:8080/healthz"},
	} {
		if got, err := localHealthURL(env(tc.env)); err != nil || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
}

// closedURL returns the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	m, _ := openDevMain(t, nil)
	addr := m.Addr()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://%s/healthz", addr)
}
