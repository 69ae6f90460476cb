package main

import (
	"cmp"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/server"
)

// envPrefix is put before the upper snake case name of a flag to make the
// name of its environment variable: --default-ttl is REDLOCKD_DEFAULT_TTL.
const envPrefix = "REDLOCKD_"

// Config is the configuration of `redlockd serve`: each field is the flag
// of the same name in kebab case (see flagSet). The zero Config is not
// valid: start from DefaultConfig. Redis URLs may contain passwords: print
// a Config with String, never field by field.
type Config struct {
	Listen                                             string
	Redis                                              []string // none: dev mode
	DefaultTTL, MaxTTL, MaxWait, NodeTimeout           time.Duration
	FenceIdleTTL                                       time.Duration
	DriftFactor                                        float64
	KeyPrefix, APIKeysFile                             string
	MetricsAuth                                        bool
	TLSCert, TLSKey, RedisCAFile                       string
	MaxWaiters, MaxWaitersPerNamespace, MaxConnections int
	ReadHeaderTimeout, IdleTimeout                     time.Duration
	LogLevel, LogFormat                                string
	RestartQuarantine                                  redlock.Quarantine
	DebugListen                                        string // "": no pprof
	// Tracing is on when the OTEL_* variables ask for it (see
	// tracingFromEnv); no flag sets it.
	Tracing bool
}

// DefaultConfig returns the defaults documented in `redlockd --help`.
func DefaultConfig() Config {
	return Config{
		Listen:            "127.0.0.1:8080",
		DefaultTTL:        redlock.DefaultTTL,
		MaxTTL:            redlock.DefaultMaxTTL,
		MaxWait:           redlock.DefaultMaxWait,
		NodeTimeout:       redlock.DefaultNodeTimeout,
		FenceIdleTTL:      redlock.DefaultFenceIdleTTL,
		DriftFactor:       redlock.DefaultDriftFactor,
		KeyPrefix:         redlock.DefaultKeyPrefix,
		LogLevel:          "info",
		LogFormat:         "json",
		RestartQuarantine: redlock.QuarantineAuto,
		MaxWaiters:        server.DefaultMaxWaiters,
		MaxConnections:    defaultMaxConnections,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
}

// UsageError is an error in the command line or the configuration: redlockd
// exits with status 64 (EX_USAGE) on it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }

func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// check is one rule of a configuration: msg is the problem when bad.
type check struct {
	bad bool
	msg string
}

// problems returns the message of each bad check, in order.
func problems(checks []check) []error {
	var errs []error
	for _, c := range checks {
		if c.bad {
			errs = append(errs, errors.New(c.msg))
		}
	}
	return errs
}

// envName returns the environment variable twin of a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagSet returns the serve flags, bound to c's fields; c's current values
// are the defaults shown in the help.
func (c *Config) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, help is printed by printServeFlags
	fs.Usage = func() {}
	fs.StringVar(&c.Listen, "listen", c.Listen,
		"`host:port` to listen on; port 0 picks a free port; a non-loopback host exposes the API to the network")
	fs.Var((*urlList)(&c.Redis), "redis", "comma-separated redis:// or rediss:// (TLS) `URLs` of the independent Redis masters "+
		"(prefer the variable: command lines are visible to other users); empty: dev mode, 5 in-memory nodes")
	fs.Var((*duration)(&c.DefaultTTL), "default-ttl", "TTL of a lock when the request gives none")
	fs.Var((*duration)(&c.MaxTTL), "max-ttl", "largest TTL a request may ask for; also the restart quarantine period")
	fs.Var((*duration)(&c.MaxWait), "max-wait", "largest wait_ms an acquire may ask for")
	fs.Var((*duration)(&c.NodeTimeout), "node-timeout", "timeout of each command on each Redis node")
	fs.Var((*duration)(&c.FenceIdleTTL), "fence-idle-ttl",
		"how long a resource's fencing-token counter lives on a node after its last use (no key lives forever; fences keep increasing)")
	fs.Float64Var(&c.DriftFactor, "drift-factor", c.DriftFactor, "clock drift allowed per unit of TTL, a `factor` in [0, 0.5)")
	fs.StringVar(&c.KeyPrefix, "key-prefix", c.KeyPrefix, "`prefix` of every Redis key redlockd writes")
	fs.StringVar(&c.APIKeysFile, "api-keys-file", c.APIKeysFile,
		"JSON `file` of API key hashes (from 'redlockd keygen'); a key reaches only its namespace; empty: no authentication")
	fs.Var((*onOff)(&c.MetricsAuth), "metrics-auth", "on: GET /metrics needs an API key too (any key of --api-keys-file)")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate `file`; with --tls-key, serve HTTPS")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key `file`; with --tls-cert, serve HTTPS")
	fs.StringVar(&c.RedisCAFile, "redis-ca-file", c.RedisCAFile, "PEM `file` of the CA certificates to verify rediss:// nodes with; empty: the system's")
	fs.IntVar(&c.MaxWaiters, "max-waiters", c.MaxWaiters, "largest `number` of acquires with wait_ms > 0 in progress at once")
	fs.IntVar(&c.MaxWaitersPerNamespace, "max-waiters-per-namespace", c.MaxWaitersPerNamespace,
		"largest `number` of those of one namespace (API key tenant); 0: a quarter of --max-waiters with --api-keys-file, else all")
	fs.IntVar(&c.MaxConnections, "max-connections", c.MaxConnections, "largest `number` of open client connections (idle ones make room)")
	fs.Var((*duration)(&c.ReadHeaderTimeout), "read-header-timeout", "time a client has to send a request's headers; the body gets 5s more")
	fs.Var((*duration)(&c.IdleTimeout), "idle-timeout", "how long an idle keep-alive connection stays open; longer than a load balancer's")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "`level` of the logs: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "`format` of the logs: json (one object per line) or console (for humans)")
	fs.Var((*quarantineMode)(&c.RestartQuarantine), "restart-quarantine",
		"auto: a node restarted less than max TTL ago does not vote unless it runs appendonly yes and appendfsync always; "+
			"on: no restarted node votes; off: every one does (only if every node runs appendfsync always)")
	fs.StringVar(&c.DebugListen, "debug-listen", c.DebugListen,
		"`host:port` to serve net/http/pprof on, apart from the API; give the host: 127.0.0.1 unless you mean to expose it; empty: off")
	return fs
}

// ParseServeFlags returns the configuration given by args (the arguments
// after "serve") and by environment variables, read through lookupEnv. A
// flag wins over its variable, which wins over the default; an empty
// variable counts as unset. See Config.Validate for the checks. May return
// flag.ErrHelp or a *UsageError.
func ParseServeFlags(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	c := DefaultConfig()
	fs := c.flagSet()
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := lookupEnv(envName(f.Name))
		if !ok || v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%s: %v", envName(f.Name), showValue(v), numberMessage(err.Error())))
		}
	})
	if len(errs) > 0 {
		return c, &UsageError{Err: errors.Join(errs...)}
	}
	if err := parseFlags(fs, joinOnOffValues(fs, args)); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, usageErrorf("serve takes no arguments, got %q", redactURL(fs.Arg(0)))
	}
	var err error
	c.Tracing, err = tracingFromEnv(lookupEnv)
	return c, err
}

// serveFlagOrder is the order of the flags in the help.
var serveFlagOrder = []string{
	"listen", "redis", "default-ttl", "max-ttl", "max-wait", "node-timeout", "drift-factor", "key-prefix",
	"fence-idle-ttl", "api-keys-file", "metrics-auth", "tls-cert", "tls-key", "redis-ca-file", "log-level", "log-format", "restart-quarantine",
	"max-waiters", "max-waiters-per-namespace", "max-connections", "read-header-timeout", "idle-timeout", "debug-listen",
}

// printServeFlags writes the help of the serve flags.
func printServeFlags(w io.Writer) {
	c := DefaultConfig()
	printFlags(w, c.flagSet(), serveFlagOrder, func(f *flag.Flag, def string) []string {
		return []string{"env " + envName(f.Name), "default " + cmp.Or(def, `""`)}
	})
}

// printFlags writes the help of the flags of fs named in order: each with
// its placeholder, its usage wrapped, and the notes that notes gives for it
// on one line (def is its default as shown: 60s, not 1m0s).
func printFlags(w io.Writer, fs *flag.FlagSet, order []string, notes func(f *flag.Flag, def string) []string) {
	for _, name := range order {
		f := fs.Lookup(name)
		placeholder, usage := flag.UnquoteUsage(f)
		sep := " "
		switch f.Value.(type) {
		case *onOff:
			sep, placeholder = "", "[=on|off]" // given alone: on
		case *duration:
			placeholder = "duration"
		case *quarantineMode:
			placeholder = "auto|on|off"
		}
		def := f.DefValue
		if d, err := time.ParseDuration(def); err == nil && placeholder == "duration" && d%time.Second == 0 {
			def = fmt.Sprintf("%ds", d/time.Second)
		}
		fmt.Fprintf(w, "  %s\n", strings.TrimSpace("--"+name+sep+placeholder))
		for _, line := range wrap(usage, 72) {
			fmt.Fprintf(w, "        %s\n", line)
		}
		if n := notes(f, def); len(n) > 0 {
			fmt.Fprintf(w, "        %s\n", strings.Join(n, ", "))
		}
	}
}

// wrap splits s into lines of at most width characters, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// Validate checks every field and returns all problems at once, as a
// *UsageError, or nil. Its messages never contain a Redis password.
func (c Config) Validate() error {
	var errs []error
	if err := validListen(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %v", c.Listen, err))
	}
	if err := validDebugListen(c.DebugListen); err != nil {
		errs = append(errs, fmt.Errorf("--debug-listen %q: %v", c.DebugListen, err))
	}
	if _, err := c.redisOptions(); err != nil {
		errs = append(errs, err)
	}
	if err := c.redlockOptions().Validate(); err != nil {
		errs = append(errs, errors.New(optionFlags.Replace(err.Error())))
	}
	errs = append(errs, problems([]check{
		// Zero means the default to redlock.Options, but is no value for a
		// flag; redlock reads a negative drift factor as none, as 0 here.
		{c.DefaultTTL == 0, "--default-ttl 0s must be positive"},
		{c.MaxTTL == 0, "--max-ttl 0s must be positive"},
		{c.MaxWait == 0, "--max-wait 0s must be positive (1ms allows practically no waiting)"},
		{c.NodeTimeout == 0, "--node-timeout 0s must be positive"},
		{c.FenceIdleTTL == 0, "--fence-idle-ttl 0s must be positive"},
		{c.DriftFactor < 0, fmt.Sprintf("--drift-factor %v must be in [0, %v)", c.DriftFactor, redlock.MaxDriftFactor)},
		{c.KeyPrefix == "", "--key-prefix must not be empty: it keeps redlockd's keys apart from other data"},
		{c.MetricsAuth && c.APIKeysFile == "", "--metrics-auth on needs --api-keys-file: there would be no key to check"},
		{(c.TLSCert == "") != (c.TLSKey == ""), "--tls-cert and --tls-key go together: give both or neither"},
		{c.RedisCAFile != "" && !c.anyRediss(), "--redis-ca-file is given but no --redis URL is rediss:// (TLS)"},
		{c.MaxWaiters < 1, fmt.Sprintf("--max-waiters %d must be at least 1", c.MaxWaiters)},
		{c.MaxWaitersPerNamespace < 0 || c.MaxWaitersPerNamespace > c.MaxWaiters, fmt.Sprintf(
			"--max-waiters-per-namespace %d must be in [0, --max-waiters %d] (0: the default share)", c.MaxWaitersPerNamespace, c.MaxWaiters)},
		{c.MaxConnections < 1, fmt.Sprintf("--max-connections %d must be at least 1", c.MaxConnections)},
		{c.ReadHeaderTimeout <= 0, fmt.Sprintf("--read-header-timeout %v must be positive", c.ReadHeaderTimeout)},
		{c.IdleTimeout <= 0, fmt.Sprintf("--idle-timeout %v must be positive", c.IdleTimeout)},
		{!slices.Contains(logLevels, c.LogLevel), fmt.Sprintf("--log-level %q must be debug, info, warn or error", c.LogLevel)},
		{c.LogFormat != "json" && c.LogFormat != "console", fmt.Sprintf("--log-format %q must be json or console", c.LogFormat)},
	})...)
	if len(errs) > 0 {
		return &UsageError{Err: errors.Join(errs...)}
	}
	return nil
}

// optionFlags turns redlock's messages about its Options into messages
// about the flags that set them.
var optionFlags = strings.NewReplacer(redlock.ErrInvalid.Error()+": ", "",
	"DefaultTTL", "--default-ttl", "MaxTTL", "--max-ttl", "MaxWait", "--max-wait",
	"NodeTimeout", "--node-timeout", "DriftFactor", "--drift-factor", "FenceIdleTTL", "--fence-idle-ttl")

// redlockOptions maps the configuration onto redlock.Options.
func (c Config) redlockOptions() redlock.Options {
	drift := c.DriftFactor
	if drift == 0 {
		drift = -1 // redlock: negative means none, zero means the default
	}
	return redlock.Options{
		DefaultTTL:   c.DefaultTTL,
		MaxTTL:       c.MaxTTL,
		MaxWait:      c.MaxWait,
		NodeTimeout:  c.NodeTimeout,
		DriftFactor:  drift,
		KeyPrefix:    c.KeyPrefix,
		FenceIdleTTL: c.FenceIdleTTL,
		Quarantine:   c.quarantine(),
	}
}

// quarantine is the restart quarantine's mode: off for dev nodes, which
// live and die with the process (a restart loses the gateway too, so there
// is nothing to quarantine against).
func (c Config) quarantine() redlock.Quarantine {
	if c.DevMode() {
		return redlock.QuarantineOff
	}
	return c.RestartQuarantine
}

// logLevels are the values of --log-level, zerolog's names.
var logLevels = []string{"debug", "info", "warn", "error"}

func validListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port, e.g. 127.0.0.1:8080 or :8080")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number in 0..65535", port)
	}
	return nil
}

// validDebugListen checks --debug-listen: empty (off) or host:port with the
// host given. pprof shows the process's insides and a CPU profile slows it
// down, so ":6060", which people type out of habit, is refused rather than
// served on every interface; a named host (0.0.0.0 too) is what the user
// asked for.
func validDebugListen(addr string) error {
	if addr == "" {
		return nil
	}
	if err := validListen(addr); err != nil {
		return err
	}
	if host, port, _ := net.SplitHostPort(addr); host == "" {
		return fmt.Errorf("no host: give 127.0.0.1:%s, or 0.0.0.0:%s to serve pprof on every interface", port, port)
	}
	return nil
}

// DevMode reports whether no Redis URL is given (embedded in-memory nodes).
func (c Config) DevMode() bool { return len(c.Redis) == 0 }

// anyRediss reports whether a Redis URL has the rediss:// (TLS) scheme.
func (c Config) anyRediss() bool {
	for _, raw := range c.Redis {
		if u, err := url.Parse(raw); err == nil && u.Scheme == "rediss" {
			return true
		}
	}
	return false
}

// loadKeys reads and validates the API keys file; nil without one.
func (c Config) loadKeys() (*server.Keys, error) {
	if c.APIKeysFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(c.APIKeysFile)
	if err != nil {
		return nil, usageErrorf("--api-keys-file: %v", err)
	}
	keys, err := server.ParseKeys(data)
	if err != nil {
		return nil, usageErrorf("--api-keys-file %s: %w", c.APIKeysFile, err)
	}
	return keys, nil
}

// redisRoots reads --redis-ca-file; nil (the system's roots) without one.
func (c Config) redisRoots() (*x509.CertPool, error) {
	if c.RedisCAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(c.RedisCAFile)
	if err != nil {
		return nil, usageErrorf("--redis-ca-file: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usageErrorf("--redis-ca-file %s: no PEM certificate found", c.RedisCAFile)
	}
	return pool, nil
}

// redisOptions parses the Redis URLs with redis.ParseURL (user, password,
// TLS and db come from the URL). Its errors never contain a password.
func (c Config) redisOptions() ([]*redis.Options, error) {
	var (
		opts []*redis.Options
		errs []error
		seen = map[string]int{}
	)
	for i, raw := range c.Redis {
		o, err := parseRedisURL(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("--redis URL #%d: %w", i+1, err))
			continue
		}
		if j, dup := seen[o.Addr]; dup {
			errs = append(errs, fmt.Errorf("--redis URL #%d: %s is already URL #%d: the nodes must be independent Redis servers", i+1, o.Addr, j))
			continue
		}
		seen[o.Addr] = i + 1
		opts = append(opts, o)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return opts, nil
}

// parseRedisURL parses one node URL. Its errors show the URL with the
// password replaced by xxxxx, or not at all.
func parseRedisURL(raw string) (*redis.Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL; show it only if it has no userinfo.
		if strings.Contains(raw, "@") {
			return nil, errors.New("not a valid URL (not shown: it may contain a password)")
		}
		return nil, fmt.Errorf("not a valid URL: %v", err)
	}
	shown := redact(u)
	switch {
	case u.Scheme != "redis" && u.Scheme != "rediss":
		return nil, fmt.Errorf("%s: scheme %q is not redis:// or rediss://", shown, u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%s: no host", shown)
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		msg := err.Error()
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
			msg = strings.ReplaceAll(msg, url.UserPassword("", p).String()[1:], "xxxxx") // percent-encoded form
		}
		return nil, fmt.Errorf("%s: %s", shown, msg)
	}
	// url.Parse takes "h:1:2" as host "h:1", port "2".
	if h, _, err := net.SplitHostPort(o.Addr); err != nil || (strings.Contains(h, ":") && net.ParseIP(h) == nil) {
		return nil, fmt.Errorf("%s: bad host:port", shown)
	}
	return o, nil
}

// redactURL returns raw fit to be shown: a URL (or a stray argument)
// without its password (xxxxx), query or fragment; a placeholder when raw
// does not parse, or has an @ that is not a URL's user info.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.User == nil && strings.Contains(raw, "@")) {
		return "<not shown: it may contain a password>"
	}
	return redact(u)
}

// hidePassword returns v, or redactURL(v) if it may hold a user and
// password: a Redis URL given where something else was expected.
func hidePassword(v string) string {
	if strings.Contains(v, "@") {
		return redactURL(v)
	}
	return v
}

// redact shows u without its password, query or fragment: go-redis takes no
// secret in the query, but a user may try ?password=.
func redact(u *url.URL) string {
	v := *u
	suffix := ""
	if v.RawQuery != "" || v.ForceQuery {
		suffix = "?…"
	}
	v.RawQuery, v.ForceQuery, v.Fragment, v.RawFragment = "", false, "", ""
	return v.Redacted() + suffix
}

// String returns the configuration as flags, Redis passwords redacted.
func (c Config) String() string {
	fs := c.flagSet()
	flags := make([]string, len(serveFlagOrder))
	for i, name := range serveFlagOrder {
		flags[i] = fmt.Sprintf("--%s=%s", name, fs.Lookup(name).Value)
	}
	return strings.Join(flags, " ")
}

// GoString redacts like String, for %#v.
func (c Config) GoString() string { return "Config{" + c.String() + "}" }

// urlList is the flag.Value of --redis: comma-separated URLs. Setting it
// replaces the list. String redacts passwords.
type urlList []string

func (l urlList) String() string {
	out := make([]string, len(l))
	for i, r := range l {
		out[i] = redactURL(r)
	}
	return strings.Join(out, ",")
}

func (l *urlList) Set(s string) error {
	*l = nil
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}
