package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// runEnvOf returns a lookupEnv function over the given NAME=value pairs.
func runEnvOf(pairs ...string) func(string) (string, bool) {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseRunFlagsDefaults(t *testing.T) {
	c, err := ParseRunFlags([]string{"--resource", "backup", "--", "./backup.sh", "--full"}, runEnvOf())
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := RunConfig{
		URL: "http://127.0.0.1:8080", Resources: []string{"backup"}, TTL: 30 * time.Second, Wait: 60 * time.Second,
		Grace: 10 * time.Second, Owner: fmt.Sprintf("%s:%d", host, os.Getpid()),
		Command: []string{"./backup.sh", "--full"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("ParseRunFlags =\n%+v\nwant\n%+v", c, want)
	}
}

func TestParseRunFlagsAll(t *testing.T) {
	c, err := ParseRunFlags([]string{
		"--url", "https://locks.example.com/prefix", "--resource", "job:1", "--ttl", "5s", "--wait", "2m",
		"--owner", "cron@host1", "--api-key-file", "/etc/redlockd.key", "--grace", "0s", "--", "sh", "-c", "exit 7",
	}, runEnvOf())
	if err != nil {
		t.Fatal(err)
	}
	want := RunConfig{
		URL: "https://locks.example.com/prefix", Resources: []string{"job:1"}, TTL: 5 * time.Second, Wait: 2 * time.Minute,
		Owner: "cron@host1", APIKeyFile: "/etc/redlockd.key", Grace: 0, Command: []string{"sh", "-c", "exit 7"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("ParseRunFlags =\n%+v\nwant\n%+v", c, want)
	}
}

// TestParseRunFlagsCommandWithoutDashes: flags end at the first argument
// that is not one, so CMD's own flags are left alone even without "--".
func TestParseRunFlagsCommandWithoutDashes(t *testing.T) {
	c, err := ParseRunFlags([]string{"--resource", "r", "rsync", "-a", "--delete", "src", "dst"}, runEnvOf())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"rsync", "-a", "--delete", "src", "dst"}; !reflect.DeepEqual(c.Command, want) {
		t.Errorf("Command = %q, want %q", c.Command, want)
	}
}

func TestParseRunFlagsEnv(t *testing.T) {
	lookup := runEnvOf("REDLOCKD_URL=http://gw:9000", "REDLOCKD_API_KEY_FILE=/run/key",
		// These are what CMD gets: a run inside CMD must not pick them up.
		"REDLOCKD_RESOURCE=parent", "REDLOCKD_TTL=1s", "REDLOCKD_WAIT=0s")
	c, err := ParseRunFlags([]string{"--resource", "r", "--", "true"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if c.URL != "http://gw:9000" || c.APIKeyFile != "/run/key" {
		t.Errorf("URL %q, key file %q: want them from the environment", c.URL, c.APIKeyFile)
	}
	if fmt.Sprint(c.Resources) != "[r]" || c.TTL != 30*time.Second || c.Wait != 60*time.Second {
		t.Errorf("resource %q ttl %v wait %v: taken from the environment", c.Resources, c.TTL, c.Wait)
	}

	// A flag wins over its variable; an empty variable counts as unset.
	c, err = ParseRunFlags([]string{"--url", "http://flag:1", "--resource", "r", "--", "true"}, lookup)
	if err != nil || c.URL != "http://flag:1" {
		t.Errorf("URL %q, %v: want the flag's", c.URL, err)
	}
	c, err = ParseRunFlags([]string{"--resource", "r", "--", "true"}, runEnvOf("REDLOCKD_URL="))
	if err != nil || c.URL != "http://127.0.0.1:8080" {
		t.Errorf("URL %q, %v: want the default for an empty variable", c.URL, err)
	}
}

func TestParseRunFlagsFailIfLocked(t *testing.T) {
	for _, args := range [][]string{
		{"--fail-if-locked"},
		{"--fail-if-locked", "--wait", "0s"},
		{"--wait", "0"},
	} {
		c, err := ParseRunFlags(append(args, "--resource", "r", "--", "true"), runEnvOf())
		if err != nil || c.Wait != 0 {
			t.Errorf("%q: wait %v, %v; want 0, nil", args, c.Wait, err)
		}
	}
	_, err := ParseRunFlags([]string{"--fail-if-locked", "--wait", "5s", "--resource", "r", "--", "true"}, runEnvOf())
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "contradict") {
		t.Errorf("--fail-if-locked --wait 5s: %v, want a usage error", err)
	}
}

func TestParseRunFlagsErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"NoResource":     {[]string{"--", "true"}, "--resource is required"},
		"BadResource":    {[]string{"--resource", "a/b", "--", "true"}, "--resource"},
		"RepeatResource": {[]string{"--resource", "a", "--resource", "a", "--", "true"}, "must not repeat"},
		"BadResources":   {[]string{"--resource", "a", "--resource", "b/c", "--", "true"}, "each of resources"},
		"ReadSeveral":    {[]string{"--resource", "a", "--resource", "b", "--read", "--", "true"}, "--read takes one --resource"},
		"NoCommand":      {[]string{"--resource", "r"}, "no command"},
		"NoCommandDash":  {[]string{"--resource", "r", "--"}, "no command"},
		"TTLTooShort":    {[]string{"--resource", "r", "--ttl", "50ms", "--", "true"}, "--ttl"},
		"BadTTL":         {[]string{"--resource", "r", "--ttl", "soon", "--", "true"}, "ttl"},
		"NegativeWait":   {[]string{"--resource", "r", "--wait", "-1s", "--", "true"}, "--wait"},
		"NegativeGrace":  {[]string{"--resource", "r", "--grace", "-1s", "--", "true"}, "--grace"},
		"ReadSemaphore":  {[]string{"--semaphore", "s", "--limit", "2", "--read", "--", "true"}, "--read goes with --resource"},
		"BadURL":         {[]string{"--url", "localhost:8080", "--resource", "r", "--", "true"}, "--url"},
		"URLScheme":      {[]string{"--url", "ftp://host", "--resource", "r", "--", "true"}, "--url"},
		"LongOwner":      {[]string{"--resource", "r", "--owner", strings.Repeat("o", 257), "--", "true"}, "--owner"},
		"UnknownFlag":    {[]string{"--resource", "r", "--no-such-flag", "--", "true"}, "no-such-flag"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRunFlags(tc.args, runEnvOf())
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("%q: %v, want a *UsageError", tc.args, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: %v, want it to mention %q", tc.args, err, tc.want)
			}
		})
	}
	// Every problem is reported at once.
	_, err := ParseRunFlags([]string{"--ttl", "1ms", "--grace", "-1s"}, runEnvOf())
	for _, want := range []string{"--resource", "--ttl", "--grace", "no command"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("several errors: %v, want it to mention %q", err, want)
		}
	}
	if _, err := ParseRunFlags([]string{"--help"}, runEnvOf()); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
}

func TestParseRunFlagsSemaphore(t *testing.T) {
	c, err := ParseRunFlags([]string{"--semaphore", "partner-api", "--limit", "4", "--owner", "w", "--", "true"}, runEnvOf("REDLOCKD_SEMAPHORE=parent"))
	if err != nil {
		t.Fatal(err)
	}
	want := RunConfig{URL: "http://127.0.0.1:8080", Semaphore: "partner-api", Limit: 4, TTL: 30 * time.Second, Wait: 60 * time.Second,
		Grace: 10 * time.Second, Owner: "w", Command: []string{"true"}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("ParseRunFlags =\n%+v\nwant\n%+v", c, want)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"Both":         {[]string{"--resource", "r", "--semaphore", "s", "--limit", "2"}, "exclude each other"},
		"Neither":      {[]string{"--limit", "2"}, "--resource is required"},
		"NoLimit":      {[]string{"--semaphore", "s"}, "--limit within [1, 256]"},
		"LimitZero":    {[]string{"--semaphore", "s", "--limit", "0"}, "--limit within [1, 256]"},
		"LimitTooBig":  {[]string{"--semaphore", "s", "--limit", "257"}, "--limit within [1, 256]"},
		"LimitNotInt":  {[]string{"--semaphore", "s", "--limit", "1.5"}, "limit"},
		"LimitAlone":   {[]string{"--resource", "r", "--limit", "2"}, "--limit goes with --semaphore"},
		"BadSemaphore": {[]string{"--semaphore", "a/b", "--limit", "2"}, "--semaphore \"a/b\""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRunFlags(append(tc.args, "--", "true"), runEnvOf())
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: %v, want a *UsageError mentioning %q", tc.args, err, tc.want)
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"run", "--semaphore", "s", "--", "true"}, &stdout, &stderr, runEnvOf()); code != exitUsage {
		t.Errorf("--semaphore without --limit: exit %d, want %d", code, exitUsage)
	}
}

// TestRunHelp checks that `redlockd run --help` documents every flag, the
// environment variables and every exit status (docs/clients.md).
func TestRunHelp(t *testing.T) {
	for _, args := range [][]string{{"run", "--help"}, {"run", "-h"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr, runEnvOf()); code != exitOK {
			t.Fatalf("%q: exit %d, want 0; stderr: %s", args, code, stderr.String())
		}
		out := stdout.String()
		for _, want := range []string{
			"--url", "--resource", "--read", "--semaphore", "--limit", "REDLOCKD_SEMAPHORE", "REDLOCKD_PERMIT", "--ttl", "--wait", "--fail-if-locked", "--owner", "--api-key-file", "--grace",
			"REDLOCKD_URL", "REDLOCKD_API_KEY_FILE", "default 30s", "default 60s", "default 10s",
			"REDLOCKD_RESOURCE", "REDLOCKD_TOKEN", "REDLOCKD_FENCING_TOKEN",
			"\n  64 ", "\n  69 ", "\n  75 ", "\n  76 ", "128+N", "SIGTERM", "SIGKILL",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%q does not mention %q", args, want)
			}
		}
	}
}

// TestRunUsageExit: a bad command line exits 64 with a message, before any
// request.
func TestRunUsageExit(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "--resource", "r"}, &stdout, &stderr, runEnvOf())
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), "no command") || !strings.Contains(stderr.String(), "redlockd run --help") {
		t.Errorf("stderr %q: want the problem and a pointer to the help", stderr.String())
	}

	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	code = run(context.Background(), []string{"run", "--resource", "r", "--api-key-file", empty, "--", "true"}, &stdout, &stderr, runEnvOf())
	if code != exitUsage || !strings.Contains(stderr.String(), "empty") {
		t.Errorf("empty key file: exit %d, stderr %q; want 64 and a message", code, stderr.String())
	}
}

func TestReadAPIKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const key = "rlk_0123456789abcdef"
	if got, err := readAPIKey(write("ok", "  "+key+"\n")); err != nil || got != key {
		t.Errorf("readAPIKey = %q, %v; want the key without white space", got, err)
	}
	for name, path := range map[string]string{
		"Missing":   filepath.Join(dir, "missing"),
		"Empty":     write("empty", "\n\n"),
		"TwoLines":  write("two", key+"\n{\"name\":\"ci\"}\n"),
		"WithSpace": write("space", key+" extra"),
	} {
		_, err := readAPIKey(path)
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.Contains(err.Error(), key) {
			t.Errorf("%s: error reveals the key: %v", name, err)
		}
	}
}

func TestExitStatus(t *testing.T) {
	for script, want := range map[string]int{
		"exit 0":        0,
		"exit 7":        7,
		"kill -TERM $$": 143,
		"kill -KILL $$": 137,
	} {
		cmd := exec.Command("sh", "-c", script)
		_ = cmd.Run()
		if got := exitStatus(cmd.ProcessState); got != want {
			t.Errorf("sh -c %q: exitStatus %d, want %d", script, got, want)
		}
	}
}
