package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

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
		"how long a resource's fencing-token counter lives on a node after it was made or last raised (no key lives forever; fences keep increasing)")
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
