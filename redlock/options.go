package redlock

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/internal/valid"
)

// Limits that are part of the contract, not options.
const (
	MinTTL         = 100 * time.Millisecond // the smallest TTL a lock may be taken or extended with
	MaxNameLen     = valid.MaxName          // the longest resource or namespace name
	MaxOwnerLen    = 256                    // the longest owner text
	MaxDriftFactor = 0.5                    // bounds Options.DriftFactor (excluded)
	constDrift     = 2 * time.Millisecond   // added to the proportional drift
)

// Defaults of Options, used when a field is zero (the server and the command
// line take theirs from here too).
const (
	DefaultTTL            = 30 * time.Second
	DefaultMaxTTL         = 60 * time.Second
	DefaultMaxWait        = 60 * time.Second
	DefaultNodeTimeout    = 50 * time.Millisecond
	DefaultDriftFactor    = 0.01
	DefaultKeyPrefix      = "redlockd:"
	DefaultRetryDelay     = 50 * time.Millisecond
	DefaultPollInterval   = 30 * time.Second
	DefaultHealthInterval = time.Second
	DefaultFenceIdleTTL   = 7 * 24 * time.Hour
	DefaultCensusInterval = time.Minute
)

// ValidName reports whether s is a valid resource or namespace name:
// 1–200 characters of [A-Za-z0-9._:-], other than "." and "..". (HTTP
// clients normalise those away as path segments, so a lock named so could
// not be released through a URL.)
func ValidName(s string) bool { return valid.Name(s) }

// ValidToken reports whether s is a valid client-chosen token:
// 22–128 characters of [A-Za-z0-9_-].
func ValidToken(s string) bool { return valid.Token(s) }

// Options configure a Coordinator. The zero value of each field means its
// default.
type Options struct {
	// DefaultTTL is used when a call gives no TTL. Default: 30s.
	DefaultTTL time.Duration
	// MaxTTL is the largest TTL a call may ask for. It is also the restart
	// quarantine period. Default: 60s.
	MaxTTL time.Duration
	// MaxWait is the largest wait an Acquire may ask for. Default: 60s.
	MaxWait time.Duration
	// NodeTimeout bounds each command on each node. Default: 50ms.
	NodeTimeout time.Duration
	// DriftFactor is the clock drift allowed per unit of TTL; validity is
	// ttl - elapsed - (ttl*DriftFactor + 2ms). Default: 0.01. A negative value
	// means no proportional drift (only the constant 2ms): unsafe, for tests.
	DriftFactor float64
	// KeyPrefix is put before every Redis key. Default: "redlockd:".
	KeyPrefix string
	// RetryDelay is the mean delay between two attempts of a waiting
	// Acquire; each delay is jittered uniformly in [RetryDelay/2, 3*RetryDelay/2].
	// Default: 50ms.
	RetryDelay time.Duration
	// Quarantine is the restart quarantine's mode: which nodes that
	// restarted within MaxTTL, or replicas made master again, do not vote
	// until MaxTTL has passed (see the package comment). Default:
	// QuarantineAuto.
	Quarantine Quarantine
	// PollInterval is how often a waiting Acquire tries again when no
	// release was announced and the holder's TTL is not over (a fallback for
	// lost messages), jittered like RetryDelay. Default: 30s.
	PollInterval time.Duration
	// Observer, if set, receives the coordinator's events (see Observer):
	// for metrics and tracing. Its methods must not block.
	Observer Observer
	// ClientHook, if set, is called with each node's client once it is made,
	// before any command: to add hooks, such as redisotel's tracing. The
	// hooks of a lock operation's commands get its caller's context (the
	// first caller's, for a batch that several callers share: see batch.go),
	// so spans they start are children of the caller's. For tracing.
	ClientHook func(*redis.Client)
	// HealthInterval is how often each node's health loop sends PING, INFO
	// and a write (SET <KeyPrefix>health; see Status); the uptime and role
	// it reads also feed the quarantine. Default: 1s.
	HealthInterval time.Duration
	// FenceIdleTTL is how long a resource's fence counter lives on a node
	// after it was made or last raised (an increment leaves its TTL): no
	// key lives forever. A counter made anew starts
	// at the node's clock in microseconds, above every fence handed out
	// before (see fence.lua and docs/safety.md). At least 2*MaxTTL.
	// Default: 7 days.
	FenceIdleTTL time.Duration
	// CensusInterval is how often the key census counts the keys of each
	// namespace on one node (see Coordinator.Census), jittered like
	// RetryDelay. Default: 1m.
	CensusInterval time.Duration
	// NoBatching sends every command in its own round trip from its own
	// goroutine, as most Redlock libraries do, instead of through each node's
	// automatic pipelining (see batch.go). For comparison.
	NoBatching bool
	// Logger receives warnings and debug lines. It never receives tokens.
	// Default: zerolog.Nop().
	Logger *zerolog.Logger
}

func (o Options) withDefaults() Options {
	o.DefaultTTL = cmp.Or(o.DefaultTTL, DefaultTTL)
	o.MaxTTL = cmp.Or(o.MaxTTL, DefaultMaxTTL)
	o.MaxWait = cmp.Or(o.MaxWait, DefaultMaxWait)
	o.NodeTimeout = cmp.Or(o.NodeTimeout, DefaultNodeTimeout)
	if o.DriftFactor == 0 {
		o.DriftFactor = DefaultDriftFactor
	} else if o.DriftFactor < 0 {
		o.DriftFactor = 0
	}
	o.KeyPrefix = cmp.Or(o.KeyPrefix, DefaultKeyPrefix)
	o.RetryDelay = cmp.Or(o.RetryDelay, DefaultRetryDelay)
	o.PollInterval = cmp.Or(o.PollInterval, DefaultPollInterval)
	o.HealthInterval = cmp.Or(o.HealthInterval, DefaultHealthInterval)
	o.FenceIdleTTL = cmp.Or(o.FenceIdleTTL, DefaultFenceIdleTTL)
	o.CensusInterval = cmp.Or(o.CensusInterval, DefaultCensusInterval)
	o.Quarantine = cmp.Or(o.Quarantine, QuarantineAuto)
	if o.Logger == nil {
		nop := zerolog.Nop()
		o.Logger = &nop
	}
	return o
}

// Validate reports every problem of o, its zero fields taken as their
// defaults, in one error that wraps ErrInvalid (New returns the same). The
// messages name the fields of Options.
func (o Options) Validate() error { return o.withDefaults().validate() }

func (o Options) validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, invalid(format, args...))
		}
	}
	check(o.DefaultTTL < MinTTL, "DefaultTTL %v is below the minimum TTL %v", o.DefaultTTL, MinTTL)
	check(o.MaxTTL < o.DefaultTTL, "MaxTTL %v is below DefaultTTL %v", o.MaxTTL, o.DefaultTTL)
	check(o.MaxWait < 0, "MaxWait %v must be positive", o.MaxWait)
	check(o.NodeTimeout < 0, "NodeTimeout %v must be positive", o.NodeTimeout)
	check(o.NodeTimeout >= o.DefaultTTL, "NodeTimeout %v must be below DefaultTTL %v, or no lock could ever be valid", o.NodeTimeout, o.DefaultTTL)
	check(!(o.DriftFactor < MaxDriftFactor), "DriftFactor %v must be in [0, %v)", o.DriftFactor, MaxDriftFactor) // NaN too
	check(o.PollInterval < 0, "PollInterval %v must be positive", o.PollInterval)
	check(o.HealthInterval < 0, "HealthInterval %v must be positive", o.HealthInterval)
	check(o.RetryDelay < 0, "RetryDelay %v must be positive", o.RetryDelay)
	check(o.CensusInterval < 0, "CensusInterval %v must be positive", o.CensusInterval)
	check(o.FenceIdleTTL < 2*o.MaxTTL, "FenceIdleTTL %v must be at least twice MaxTTL %v", o.FenceIdleTTL, o.MaxTTL)
	check(!slices.Contains(quarantines, o.Quarantine), "Quarantine %q must be auto, on or off", o.Quarantine)
	return errors.Join(errs...)
}

// Quarantine is a mode of the restart quarantine (Options.Quarantine).
type Quarantine string

// The modes of the restart quarantine.
const (
	// QuarantineAuto quarantines a restarted node unless it keeps every
	// acknowledged write across a restart: appendonly yes and appendfsync
	// always, read with CONFIG GET on every new connection and health
	// check (a node that refuses CONFIG is taken not to), in the process
	// that restarted and in the new one. A replica made master again is
	// always quarantined: it never had its master's last writes.
	QuarantineAuto Quarantine = "auto"
	// QuarantineOn quarantines every restarted node, durable or not.
	QuarantineOn Quarantine = "on"
	// QuarantineOff quarantines no node: a node that restarted, or a
	// replica made master again, votes at once. Only safe when every node
	// runs with appendonly yes and appendfsync always.
	QuarantineOff Quarantine = "off"
)

var quarantines = []Quarantine{QuarantineAuto, QuarantineOn, QuarantineOff}

// AcquireOptions are the per-call options of Acquire.
type AcquireOptions struct {
	// Namespace separates tenants: the same resource in two namespaces is two
	// locks. Default: "" (the default namespace).
	Namespace string
	TTL       time.Duration // default: Options.DefaultTTL
	// Wait is how long to keep trying while the lock is held. Default: 0,
	// one round.
	Wait time.Duration
	// Token makes Acquire idempotent: if the lock is already held with this
	// token it is re-acquired with a fresh TTL and the same fence. Default: a
	// new random token.
	Token string
	Owner string // free text shown by Inspect
	// Mode is ModeWrite (exclusive, the default; "" means it too) or
	// ModeRead (shared with other readers). Extend, Release and Inspect take
	// no mode: the nodes know whether a token is the writer or a reader.
	Mode Mode
}

// Mode is how a lock is held: by one writer, or shared by readers.
type Mode string

// The modes of a lock (docs/read-write-locks.md). A reader conflicts only with a writer, so
// Redlock's quorum argument holds pairwise; a waiting writer keeps new
// readers out.
const (
	ModeWrite Mode = "write"
	ModeRead  Mode = "read"
)
