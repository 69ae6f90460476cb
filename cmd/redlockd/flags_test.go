package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/redlockd/redlockd/redlock"
)

// TestOnOffSpellings checks that every on/off flag, of serve and of run,
// takes the same spellings in every form: alone, =value, the next argument
// (serve) and the environment variable; --restart-quarantine takes them for
// on and off too.
func TestOnOffSpellings(t *testing.T) {
	for _, spelling := range []struct {
		words []string
		want  bool
	}{{[]string{"on", "true", "yes", "1", "ON", "True", "YES"}, true}, {[]string{"off", "false", "no", "0", "OFF", "False", "No"}, false}} {
		for _, w := range spelling.words {
			serve := map[string][]string{
				"separate": {"--restart-quarantine", w, "--metrics-auth", w, "--api-keys-file", "k"},
				"joined":   {"--restart-quarantine=" + w, "--metrics-auth=" + w, "--api-keys-file", "k"},
			}
			for form, args := range serve {
				c, err := ParseServeFlags(args, env(nil))
				if err != nil || (c.RestartQuarantine == redlock.QuarantineOn) != spelling.want || c.MetricsAuth != spelling.want {
					t.Errorf("serve %s %q: %+v, %v; want both %v", form, w, c, err, spelling.want)
				}
			}
			c, err := ParseServeFlags(nil, env(map[string]string{"REDLOCKD_RESTART_QUARANTINE": w, "REDLOCKD_METRICS_AUTH": w}))
			if err != nil || (c.RestartQuarantine == redlock.QuarantineOn) != spelling.want || c.MetricsAuth != spelling.want {
				t.Errorf("serve env %q: %+v, %v; want both %v", w, c, err, spelling.want)
			}
			r, err := ParseRunFlags([]string{"--resource", "r", "--fail-if-locked=" + w, "--", "true"}, runEnvOf())
			if err != nil || (r.Wait == 0) != spelling.want {
				t.Errorf("run --fail-if-locked=%s: wait %v, %v; want fail-if-locked %v", w, r.Wait, err, spelling.want)
			}
		}
	}
	c, err := ParseServeFlags([]string{"--restart-quarantine=off", "--metrics-auth", "--api-keys-file", "k"}, env(nil))
	if err != nil || !c.MetricsAuth {
		t.Errorf("--metrics-auth alone: %v, %v; want on", c.MetricsAuth, err)
	}
}

// TestCLIMessages checks the messages of bad command lines through run: flags
// named as typed (--x, never -x), the value beside its flag, one
// "redlockd:" prefix.
func TestCLIMessages(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-ttl", "5"}, "redlockd: --max-ttl 5: missing unit, e.g. 5s\n"},
		{[]string{"-max-ttl", "5"}, "redlockd: --max-ttl 5: missing unit, e.g. 5s\n"},
		{[]string{"serve", "--no-such"}, "redlockd: unknown flag --no-such\n"},
		{[]string{"--node-timeout"}, "redlockd: --node-timeout needs a value\n"},
		{[]string{"run", "--ttl", "30", "--resource", "r", "--", "true"}, "redlockd run: --ttl 30: missing unit, e.g. 30s\n"},
		{[]string{"run", "--fail-if-locked=maybe", "--", "true"}, "redlockd run: --fail-if-locked maybe: want on/off, true/false, yes/no or 1/0\n"},
		{[]string{"probe", "--timeout", "2"}, "redlockd: probe: --timeout 2: missing unit, e.g. 2s\n"},
		{[]string{"probe", "--insecure=maybe"}, "redlockd: probe: --insecure maybe: want on/off"},
		{[]string{"keygen", "--bad"}, "redlockd: keygen: unknown flag --bad\n"},
		{[]string{"--listen", busy.Addr().String(), "--log-level", "error"}, "redlockd: listen on " + busy.Addr().String() + ": "},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), tc.args, &stdout, &stderr, env(nil))
		got := stderr.String()
		if code == exitOK || !strings.Contains(got, tc.want) {
			t.Errorf("redlockd %q: exit %d, stderr %q; want it to contain %q", tc.args, code, got, tc.want)
		}
		if strings.Contains(got, "redlockd: redlockd:") || strings.Contains(got, " -") && !strings.Contains(got, " --") {
			t.Errorf("redlockd %q: stderr %q has a doubled prefix or a one-dash flag", tc.args, got)
		}
	}
}
