package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/server"
)

func TestCheckEnv(t *testing.T) {
	withKeys := DefaultConfig()
	withKeys.APIKeysFile, withKeys.TLSCert, withKeys.TLSKey, withKeys.MetricsAuth = "k.json", "c.pem", "k.pem", true
	bare := DefaultConfig()
	for _, tc := range []struct {
		name        string
		cmd         string
		cfg         *Config
		env         string
		suggest     string
		fatal, none bool
	}{
		{"security typo, no keys", "serve", &bare, "REDLOCKD_API_KEYS_FIEL", "REDLOCKD_API_KEYS_FILE", true, false},
		{"security typo, keys given", "serve", &withKeys, "REDLOCKD_API_KEYS_FIEL", "REDLOCKD_API_KEYS_FILE", false, false},
		{"run's key file, no keys", "serve", &bare, "REDLOCKD_API_KEY_FILE", "REDLOCKD_API_KEYS_FILE", true, false},
		{"run's key file, keys given", "serve", &withKeys, "REDLOCKD_API_KEY_FILE", "", false, true},
		{"lower case", "serve", &bare, "redlockd_api_keys_file", "REDLOCKD_API_KEYS_FILE", true, false},
		{"dashes", "serve", &bare, "REDLOCKD_TLS-CERT", "REDLOCKD_TLS_CERT", true, false},
		{"metrics auth", "serve", &bare, "REDLOCKD_METRIC_AUTH", "REDLOCKD_METRICS_AUTH", true, false},
		{"swapped letters", "serve", &bare, "REDLOCKD_MAX_WAITRES", "REDLOCKD_MAX_WAITERS", false, false},
		{"close to nothing", "serve", &bare, "REDLOCKD_COLOUR", "", false, false},
		{"serve's own", "serve", &bare, "REDLOCKD_LISTEN", "", false, true},
		{"run's key", "serve", &bare, "REDLOCKD_API_KEY", "", false, true},
		{"run's command's", "serve", &bare, "REDLOCKD_FENCING_TOKEN", "", false, true},
		{"the tests'", "serve", &bare, "REDLOCKD_TESTS_ANYTHING", "", false, true},
		{"run: typo", "run", nil, "REDLOCKD_API_KY", "REDLOCKD_API_KEY", false, false},
		{"run: keys-file typo is no error", "run", nil, "REDLOCKD_API_KEYS_FIEL", "REDLOCKD_API_KEYS_FILE", false, false},
		{"run: serve's", "run", nil, "REDLOCKD_REDIS", "", false, true},
		{"run: its command's", "run", nil, "REDLOCKD_TOKEN", "", false, true},
		{"not ours", "serve", &bare, "REDLOCK_X", "", false, true},
		{"the prefix alone", "serve", &bare, "REDLOCKD_", "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkEnv([]string{tc.env + "=secret-value", "HOME=/"}, tc.cmd, tc.cfg)
			if tc.none {
				if len(got) != 0 {
					t.Fatalf("findings %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].Name != tc.env || got[0].Suggest != tc.suggest || (got[0].Fatal != "") != tc.fatal {
				t.Fatalf("findings %+v, want %s suggesting %q, fatal %v", got, tc.env, tc.suggest, tc.fatal)
			}
			msg := got[0].String()
			if !strings.Contains(msg, tc.env) || strings.Contains(msg, "secret-value") {
				t.Errorf("message %q: want the name, not the value", msg)
			}
		})
	}
}

// TestKnownEnvNotNearSecurity: no variable some part of redlockd reads or
// sets is taken for a misspelt security setting of serve, but for run's
// REDLOCKD_API_KEY_FILE (one letter from REDLOCKD_API_KEYS_FILE).
func TestKnownEnvNotNearSecurity(t *testing.T) {
	var environ []string
	for name := range knownEnv() {
		environ = append(environ, name+"=x")
	}
	c := DefaultConfig()
	var fatal []string
	for _, f := range checkEnv(environ, "serve", &c) {
		if f.Fatal == "" {
			t.Errorf("%s reported: %v", f.Name, f)
		} else {
			fatal = append(fatal, f.Name)
		}
	}
	if !slices.Equal(fatal, []string{"REDLOCKD_API_KEY_FILE"}) {
		t.Errorf("fatal for serve without keys: %v, want REDLOCKD_API_KEY_FILE only", fatal)
	}
	if got := checkEnv(environ, "run", nil); len(got) != 0 {
		t.Errorf("run reports known variables: %v", got)
	}
}

// TestKnownEnvCoversRepo: every REDLOCKD_* name in the repository (code,
// tests, docs, examples, deployment files) is known, so that none is
// reported wrongly. env.go itself, the unit tests of this package and the
// black-box test of the report, which use unknown names on purpose, are
// left out.
func TestKnownEnvCoversRepo(t *testing.T) {
	root := filepath.Join("..", "..")
	skip := map[string]bool{filepath.Join("tests", "signals_test.go"): true, filepath.Join("cmd", "redlockd", "env.go"): true}
	known := knownEnv()
	re := regexp.MustCompile(`REDLOCKD_[A-Z0-9_]*[A-Z0-9]`)
	seen := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if skip[rel] || (filepath.Dir(rel) == filepath.Join("cmd", "redlockd") && strings.HasSuffix(rel, "_test.go")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil || bytes.IndexByte(b, 0) >= 0 {
			return err // binary files are skipped
		}
		for _, name := range re.FindAllString(string(b), -1) {
			seen++
			if _, ok := known[name]; !ok && !strings.HasPrefix(name, testEnvPrefix) {
				t.Errorf("%s: %s is not a known variable: add it to env.go", rel, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("found only %d REDLOCKD_* names: is the repository root %s?", seen, root)
	}
}

// TestServeUnknownEnv: serve refuses a misspelt keys-file variable with 64,
// naming it and not its value, and logs other unknown variables as
// warnings.
func TestServeUnknownEnv(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--listen", "127.0.0.1:0"}, &stdout, &stderr, env(nil),
		"REDLOCKD_API_KEYS_FIEL=/the/value")
	if code != exitUsage || !strings.Contains(stderr.String(), "REDLOCKD_API_KEYS_FIEL (did you mean REDLOCKD_API_KEYS_FILE?)") ||
		strings.Contains(stderr.String(), "/the/value") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}

	m := NewMain()
	m.Config.Listen = "127.0.0.1:0"
	m.UnknownEnv = checkEnv([]string{"REDLOCKD_MAX_WAITER=5"}, "serve", &m.Config)
	logs := &logBuffer{}
	m.Stderr = logs
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var found bool
	for _, l := range logs.lines(t) {
		if l["variable"] == "REDLOCKD_MAX_WAITER" && l["did_you_mean"] == "REDLOCKD_MAX_WAITERS" && l["level"] == "warn" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no warning about REDLOCKD_MAX_WAITER:\n%s", logs.String())
	}
}

// TestMainReload: Reload swaps in new API keys and a new certificate; a key
// pair that does not match, or a keys file that does not parse, keeps the
// old ones and is logged as an error.
func TestMainReload(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	writeKeys := func(key string) {
		t.Helper()
		entry := `{"keys":[{"name":"k","namespace":"ns","sha256":"` + server.HashKey(key) + `"}]}`
		if err := os.WriteFile(keys, []byte(entry), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys("first-key-0123456789")
	cert1, key1, pool1 := selfSignedCert(t)
	m, logs := openDevMain(t, func(c *Config) { c.APIKeysFile, c.TLSCert, c.TLSKey = keys, cert1, key1 })
	get := func(pool *x509.CertPool, key string) (int, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		req, _ := http.NewRequest(http.MethodGet, "https://"+m.Addr()+"/locks/r", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(pool1, "first-key-0123456789"); err != nil || code == http.StatusUnauthorized {
		t.Fatalf("before: %d %v", code, err)
	}

	writeKeys("second-key-0123456789")
	cert2, key2, pool2 := selfSignedCert(t)
	copyTo := func(src, dst string) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyTo(cert2, cert1)
	copyTo(key2, key1)
	if err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(pool1, "second-key-0123456789"); err == nil {
		t.Error("the old certificate is still served")
	}
	if code, err := get(pool2, "second-key-0123456789"); err != nil || code == http.StatusUnauthorized {
		t.Errorf("new key and certificate: %d %v", code, err)
	}
	if code, err := get(pool2, "first-key-0123456789"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("old key: %d %v, want 401", code, err)
	}

	// A key that does not match the certificate, and a broken keys file.
	_, key3, _ := selfSignedCert(t)
	copyTo(key3, key1)
	if err := os.WriteFile(keys, []byte(`{"keys":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Reload(); err == nil {
		t.Fatal("Reload of broken files: no error")
	}
	if code, err := get(pool2, "second-key-0123456789"); err != nil || code == http.StatusUnauthorized {
		t.Errorf("after a failed reload: %d %v", code, err)
	}
	for _, msg := range []string{"API keys not reloaded: the previous keys stay in use", "TLS certificate not reloaded: the previous certificate stays in use"} {
		if l := logs.find(t, msg); l == nil || l["level"] != "error" || l["error"] == nil {
			t.Errorf("log line %q: %v", msg, l)
		}
	}
	key3PEM, _ := os.ReadFile(key3)
	if s := logs.String(); strings.Contains(s, "second-key-0123456789") || strings.Contains(s, string(key3PEM)) {
		t.Error("the log shows a key")
	}
}

// TestParseRunAPIKey: the key comes from --api-key-file given as a flag,
// else REDLOCKD_API_KEY, else REDLOCKD_API_KEY_FILE; a malformed
// REDLOCKD_API_KEY is a usage error that does not quote it.
func TestParseRunAPIKey(t *testing.T) {
	args := func(extra ...string) []string {
		return append(append([]string{"--resource", "r"}, extra...), "--", "true")
	}
	for _, tc := range []struct {
		name      string
		env       []string
		args      []string
		key, file string
	}{
		{"env key", []string{"REDLOCKD_API_KEY= k3y "}, nil, "k3y", ""},
		{"env key over env file", []string{"REDLOCKD_API_KEY=k3y", "REDLOCKD_API_KEY_FILE=/f"}, nil, "k3y", ""},
		{"flag over env key", []string{"REDLOCKD_API_KEY=k3y"}, []string{"--api-key-file", "/flag"}, "", "/flag"},
		{"env file", []string{"REDLOCKD_API_KEY_FILE=/f"}, nil, "", "/f"},
		{"empty env key", []string{"REDLOCKD_API_KEY=", "REDLOCKD_API_KEY_FILE=/f"}, nil, "", "/f"},
	} {
		c, err := ParseRunFlags(args(tc.args...), runEnvOf(tc.env...))
		if err != nil || c.APIKey != tc.key || c.APIKeyFile != tc.file {
			t.Errorf("%s: key %q file %q (%v), want %q %q", tc.name, c.APIKey, c.APIKeyFile, err, tc.key, tc.file)
		}
	}
	_, err := ParseRunFlags(args(), runEnvOf("REDLOCKD_API_KEY=two words"))
	if err == nil || strings.Contains(err.Error(), "words") {
		t.Errorf("malformed key: %v", err)
	}
}
