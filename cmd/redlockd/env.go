package main

import (
	"flag"
	"fmt"
	"maps"
	"strings"

	"github.com/rs/zerolog"
)

// REDLOCKD_* environment variables: each serve flag has one (envName), and
// the ones that no part of redlockd reads are reported.
//
// A misspelt variable is otherwise ignored: REDLOCKD_API_KEYS_FIEL would run
// a gateway without authentication. serve and run name each (never its value)
// with the known name closest to it; serve refuses to start (exit 64) when it
// looks like a security setting not in effect, and warns of any other.

// envPrefix is put before the upper snake case name of a flag to make the
// name of its environment variable: --default-ttl is REDLOCKD_DEFAULT_TTL.
const envPrefix = "REDLOCKD_"

// envName returns the environment variable twin of a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// otherEnv are the REDLOCKD_* names of something other than serve's flags,
// with what they belong to: run; run's command (a gateway or a nested run
// started from it sees them); the tests in tests/; the benchmark in bench/.
var otherEnv = map[string]string{
	runAPIKeyEnv: "run", runEnv["url"]: "run", runEnv["api-key-file"]: "run",
	"REDLOCKD_RESOURCE": "run's command", "REDLOCKD_TOKEN": "run's command", "REDLOCKD_FENCING_TOKEN": "run's command",
	"REDLOCKD_SEMAPHORE": "run's command", "REDLOCKD_PERMIT": "run's command",
	"REDLOCKD_SOAK_SEED": "the tests", "REDLOCKD_SOAK_DURATION": "the tests",
	"REDLOCKD_BENCH_BARE": "the benchmark", "REDLOCKD_BENCH_BARE_NODES": "the benchmark", "REDLOCKD_BENCH_BARE_CYCLE": "the benchmark",
}

// testEnvPrefix starts the names the tests set for their own helper processes.
const testEnvPrefix = "REDLOCKD_TESTS_"

// runAPIKeyEnv holds the API key of `redlockd run`.
const runAPIKeyEnv = "REDLOCKD_API_KEY"

// securityEnv are the serve variables whose absence leaves the gateway less
// protected, with what it would do without them.
var securityEnv = map[string]string{
	"REDLOCKD_API_KEYS_FILE": "run without API keys (anyone who reaches the port can take and release locks)",
	"REDLOCKD_METRICS_AUTH":  "serve /metrics without an API key",
	"REDLOCKD_TLS_CERT":      "serve plain HTTP instead of HTTPS",
	"REDLOCKD_TLS_KEY":       "serve plain HTTP instead of HTTPS",
}

// knownEnv returns every REDLOCKD_* name some part of redlockd reads or
// sets, with the command it belongs to: serve, run, "run's command" or
// "the tests".
func knownEnv() map[string]string {
	known := maps.Clone(otherEnv)
	c := DefaultConfig()
	c.flagSet().VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = "serve" })
	return known
}

// envFinding is a REDLOCKD_* variable of the environment that the running
// command does not read.
type envFinding struct {
	Name    string // its value is never kept
	Suggest string // the known name closest to Name, or ""
	// Owner is what Name belongs to when it is known but not the running
	// command's; Fatal is the consequence when Name looks like a security
	// setting of serve that is not in effect.
	Owner, Fatal string
}

// String describes f for a log line or an error message.
func (f envFinding) String() string {
	s := "unknown environment variable " + f.Name
	if f.Owner != "" {
		s = fmt.Sprintf("environment variable %s is for %s, not serve", f.Name, f.Owner)
	}
	if f.Suggest != "" {
		s += " (did you mean " + f.Suggest + "?)"
	}
	if f.Fatal != "" {
		return s + ": refusing to " + f.Fatal + "; fix or unset the variable"
	}
	return s + ": ignored"
}

// logUnknownEnv logs each finding as a warning, with the name it suggests.
func logUnknownEnv(log zerolog.Logger, findings []envFinding) {
	for _, f := range findings {
		e := log.Warn().Str("variable", f.Name)
		if f.Suggest != "" {
			e = e.Str("did_you_mean", f.Suggest)
		}
		e.Msg(f.String())
	}
}

// checkEnv returns the REDLOCKD_* variables of environ (NAME=value) that
// cmd ("serve" or "run") does not read, in order. For serve, cfg is the
// parsed configuration: a variable close to a security setting it lacks is
// fatal, even another command's (run's REDLOCKD_API_KEY_FILE is one letter
// from REDLOCKD_API_KEYS_FILE). For run, cfg is nil and nothing is fatal.
func checkEnv(environ []string, cmd string, cfg *Config) []envFinding {
	known := knownEnv()
	missing := map[string]string{} // the security settings serve does not have
	if cfg != nil {
		on := map[string]bool{"REDLOCKD_API_KEYS_FILE": cfg.APIKeysFile != "", "REDLOCKD_METRICS_AUTH": cfg.MetricsAuth,
			"REDLOCKD_TLS_CERT": cfg.TLSCert != "", "REDLOCKD_TLS_KEY": cfg.TLSKey != ""}
		for name, what := range securityEnv {
			if !on[name] {
				missing[name] = what
			}
		}
	}
	var out []envFinding
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if len(name) <= len(envPrefix) || !strings.EqualFold(name[:len(envPrefix)], envPrefix) {
			continue
		}
		owner, isKnown := known[name]
		if !isKnown && strings.HasPrefix(name, testEnvPrefix) {
			owner, isKnown = "the tests", true
		}
		if isKnown && (owner == cmd || (cmd == "run" && owner == "run's command")) {
			continue
		}
		f := envFinding{Name: name}
		switch sec := closest(name, missing); {
		case sec != "":
			f.Suggest, f.Fatal = sec, missing[sec]
			if isKnown {
				f.Owner = owner
			}
		case isKnown:
			continue // another command's: fine
		default:
			f.Suggest = closest(name, known)
		}
		out = append(out, f)
	}
	return out
}

// closest returns the name among those of names nearest to name, or "" if
// none is near: the same but for case and - for _, or one edit away (two
// for names past the prefix longer than 6 characters).
func closest(name string, names map[string]string) string {
	best, bestD := "", -1
	for k := range names {
		a, b := normEnv(name), normEnv(k)
		d, limit := distance(a, b), 1
		if len(b) > 6 {
			limit = 2
		}
		if d <= limit && (bestD < 0 || d < bestD || (d == bestD && k < best)) {
			best, bestD = k, d
		}
	}
	return best
}

// normEnv returns the part of a variable name after REDLOCKD_, upper case,
// with - as _.
func normEnv(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name[len(envPrefix):], "-", "_"))
}

// distance returns the optimal string alignment distance of a and b (bytes):
// insertions, deletions, substitutions and swaps of two neighbours.
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
