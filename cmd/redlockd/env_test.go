package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
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
