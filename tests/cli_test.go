package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHelp: `redlockd --help` lists every flag of docs/configuration.md, each with its
// environment variable (docs/configuration.md "Configuration").
func TestHelp(t *testing.T) {
	t.Parallel()
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	out, err := exec.Command(binPath, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("redlockd --help: %v\n%s", err, out)
	}
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `(REDLOCKD_[A-Z_]+)` \\|").FindAllStringSubmatch(string(doc), -1)
	if len(rows) < 20 {
		t.Fatalf("docs/configuration.md: %d flag rows found, the table's form changed?", len(rows))
	}
	for _, row := range rows {
		for _, name := range []string{"--" + row[1], row[2]} {
			if !bytes.Contains(out, []byte(name)) {
				t.Errorf("--help does not name %s (docs/configuration.md does)", name)
			}
		}
	}
}

// TestUsageErrors: a bad configuration (an unknown flag or subcommand, a bad
// duration, quarantine mode or Redis URL, a default TTL above the max) stops
// redlockd at once with a message and exit 64, without serving
// (docs/configuration.md "Configuration": exit statuses).
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	node := startRedis(t)
	for name, args := range map[string][]string{
		"UnknownFlag":       {"serve", "--no-such-flag"},
		"BadDuration":       {"serve", "--node-timeout", "fast"},
		"DefaultAboveMax":   {"serve", "--default-ttl", "90s", "--max-ttl", "60s"},
		"BadQuarantine":     {"serve", "--restart-quarantine", "maybe"},
		"BadRedisURL":       {"serve", "--redis", "http://" + node.Addr},
		"UnknownSubcommand": {"frobnicate"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binPath, append(args, "--listen", "127.0.0.1:0")...)
			cmd.Env = cleanEnv()
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("redlockd %v: %v, want a non-zero exit\n%s", args, err, out)
			}
			if code := ee.ExitCode(); code != 64 {
				t.Errorf("redlockd %v exited %d, want 64 (usage error, as --help says)\n%s", args, code, out)
			}
			if len(bytes.TrimSpace(out)) == 0 {
				t.Errorf("redlockd %v exited %d without a message", args, ee.ExitCode())
			}
		})
	}
}

// TestDevMode: `redlockd` with no subcommand and no --redis serves on five
// embedded nodes and warns that nothing is durable (README.md
// "Two commands").
func TestDevMode(t *testing.T) {
	t.Parallel()
	g := startProcess(t, nil, "--listen", "127.0.0.1:0")
	g.waitReady(t)
	res := resourceName(t)
	start := time.Now()
	a := lock(t, g, res, `{"ttl_ms":5000}`)
	checkLockBody(t, a, start, res, 5000, 5)
	wantProblem(t, acquire(t, g, res, ""), http.StatusConflict, "lock-held")
	wantStatus(t, release(t, g, res, a.str(t, "token")), http.StatusNoContent)
	g.Stop()
	if !strings.Contains(g.Stderr(), `"level":"warn"`) {
		t.Errorf("dev mode did not warn:\n%s", g.Stderr())
	}
}

// TestEnvConfig: every flag has an environment twin: a gateway configured
// through REDLOCKD_* variables alone (listen address, nodes, quarantine, key
// prefix, default TTL) applies each of them (docs/configuration.md
// "Configuration").
func TestEnvConfig(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	g := startProcess(t, []string{
		"REDLOCKD_LISTEN=127.0.0.1:0",
		"REDLOCKD_REDIS=" + redisURLs(nodes),
		"REDLOCKD_RESTART_QUARANTINE=off",
		"REDLOCKD_KEY_PREFIX=envtest:",
		"REDLOCKD_DEFAULT_TTL=7s",
	}, "serve")
	g.waitReady(t)
	res := resourceName(t)
	a := lock(t, g, res, "")
	if got := a.num(t, "ttl_ms"); got != 7000 {
		t.Errorf("ttl_ms %d, want 7000 from REDLOCKD_DEFAULT_TTL", got)
	}
	if got := a.num(t, "nodes"); got != 3 {
		t.Errorf("nodes %d, want the 3 of REDLOCKD_REDIS", got)
	}
	snap := keySnapshot(t, nodes)
	if !strings.Contains(snap, `"envtest:`) || !strings.Contains(snap, res) {
		t.Errorf("no key under REDLOCKD_KEY_PREFIX envtest: for %s:\n%s", res, snap)
	}
	if strings.Contains(snap, `"redlockd:`) {
		t.Errorf("keys under the default prefix although REDLOCKD_KEY_PREFIX is set:\n%s", snap)
	}
}

// TestCLIFlagMessages: a bad flag is named as typed, a duration without a
// unit is refused with `--max-ttl 5: missing unit, e.g. 5s`, an on/off
// setting lists the spellings it takes, each message has one "redlockd:"
// prefix, and --version works as version does (docs/configuration.md
// "Configuration").
func TestCLIFlagMessages(t *testing.T) {
	t.Parallel()
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--max-ttl", "5"}, 64, "redlockd: --max-ttl 5: missing unit, e.g. 5s\n"},
		{[]string{"--no-such-flag"}, 64, "redlockd: unknown flag --no-such-flag\n"},
		{[]string{"--restart-quarantine", "maybe"}, 64, "redlockd: --restart-quarantine maybe: want auto, or on/off, true/false, yes/no or 1/0\n"},
		{[]string{"run", "--fail-if-locked=maybe", "--", "true"}, 64, "redlockd run: --fail-if-locked maybe: want on/off"},
		{[]string{"--version"}, 0, "redlockd "},
	} {
		cmd := exec.Command(binPath, tc.args...)
		cmd.Env = cleanEnv()
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("redlockd %q: exit %d, output %q; want %d and %q", tc.args, code, out, tc.code, tc.want)
		}
		if strings.Contains(string(out), "redlockd: redlockd:") {
			t.Errorf("redlockd %q: doubled prefix in %q", tc.args, out)
		}
	}
}

// TestCLIDebugListen: --debug-listen serves pprof on a port of its own that
// serves nothing else, and the API port has no /debug/pprof
// (docs/configuration.md "Configuration": Profiling).
func TestCLIDebugListen(t *testing.T) {
	t.Parallel()
	g := startProcess(t, nil, "--listen", "127.0.0.1:0", "--debug-listen", "127.0.0.1:0")
	var debug string
	for line := range strings.SplitSeq(g.Stderr(), "\n") {
		var m struct{ Message, Addr string }
		if json.Unmarshal([]byte(line), &m) == nil && strings.HasPrefix(m.Message, "debug listening") {
			debug = "http://" + m.Addr
		}
	}
	if debug == "" {
		t.Fatalf("no debug listening line:\n%s", g.Stderr())
	}
	for url, want := range map[string]int{
		debug + "/debug/pprof/heap?debug=1": http.StatusOK,
		debug + "/healthz":                  http.StatusNotFound,
		g.URL + "/debug/pprof/":             http.StatusNotFound,
		g.URL + "/debug/pprof/heap":         http.StatusNotFound,
	} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", url, resp.StatusCode, want)
		}
	}
}

// TestZeroTTLFlags: --default-ttl 0 and --max-ttl 0 are refused with exit 64,
// as --max-wait 0 is (docs/design.md "Decisions on requests and answers"),
// instead of starting with the library's defaults while the start-up log says
// 0s.
func TestZeroTTLFlags(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--default-ttl", "--max-ttl"} {
		t.Run(flag, func(t *testing.T) {
			p := runProc(t, nil, "serve", "--listen", "127.0.0.1:0", flag, "0")
			p.wantExit(64, 10*time.Second)
			if want := flag + " 0s must be positive"; !strings.Contains(p.errs.String(), want) {
				t.Errorf("stderr does not say %q:\n%s", want, p.errs.String())
			}
		})
	}
}
