package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/server"
)

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
