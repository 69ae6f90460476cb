package redlock

import (
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Limits that are part of the contract, not options.
const (
	// MinTTL is the smallest TTL a lock may be taken or extended with.
	MinTTL = 100 * time.Millisecond
	// MaxNameLen is the longest resource or namespace name.
	MaxNameLen = 200
	// MaxOwnerLen is the longest owner text.
	MaxOwnerLen = 256
	// Quorum-wide constant drift added to the proportional drift.
	constDrift = 2 * time.Millisecond
)

// ValidName reports whether s is a valid resource or namespace name:
// 1–200 characters of [A-Za-z0-9._:-], other than "." and "..". (HTTP
// clients normalise those away as path segments, so a lock named so could
// not be released through a URL.)
func ValidName(s string) bool {
	return s != "." && s != ".." && validChars(s, 1, MaxNameLen, &nameChars)
}

// ValidToken reports whether s is a valid client-chosen token:
// 22–128 characters of [A-Za-z0-9_-].
func ValidToken(s string) bool { return validChars(s, 22, 128, &tokenChars) }

// nameChars and tokenChars are the bytes names and tokens may have.
var nameChars, tokenChars = charSet("._:-"), charSet("_-")

// charSet returns the set of the ASCII letters, digits and bytes of extra.
func charSet(extra string) (set [256]bool) {
	for c := range 256 {
		set[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(extra, byte(c)) >= 0
	}
	return set
}

// validChars reports whether s is min to max bytes of set. (Every request
// checks a name and often a token, the gateway more than once: a table is
// some twenty times cheaper than the equivalent regexp.)
func validChars(s string, min, max int, set *[256]bool) bool {
	if len(s) < min || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !set[s[i]] {
			return false
		}
	}
	return true
}

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
	// NoQuarantine turns restart quarantine off: a node that restarted, or
	// that was a replica and is a master again, votes at once. Only safe when every node runs with appendfsync always.
	// Default: quarantine on.
	NoQuarantine bool
	// PollInterval is how often a waiting Acquire tries again when no
	// release was announced and the holder's TTL is not over: a fallback for
	// lost messages (a re-made subscription also wakes every waiter),
	// jittered in [PollInterval/2, 3*PollInterval/2). Default: 30s.
	PollInterval time.Duration
	// OnWait, if set, is called when a waiting Acquire (Wait > 0) ends, with
	// how long it waited and whether it got the lock. For metrics.
	OnWait func(waited time.Duration, acquired bool)
	// OnNodeCommand, if set, is called after each call to one node in a
	// fan-out (acquire, release, extend, inspect, ...), with the node's
	// host:port (never credentials), how long the call took and its error
	// (nil on success; a timeout is the context's error). It is called from
	// several goroutines at once and must not block. For metrics.
	// Default: none.
	OnNodeCommand func(node string, d time.Duration, err error)
	// HealthInterval is how often each node's health loop sends PING, INFO
	// and a write (SET <KeyPrefix>health; see Status); the uptime and role
	// it reads also feed the quarantine. Default: 1s.
	HealthInterval time.Duration
	// NoBatching sends every command to its node in its own round trip from
	// its own goroutine, as most Redlock libraries do, instead of sharing
	// pipelines between concurrent calls. For comparison. Default: batching,
	// through each node's go-redis automatic pipelining (see batch.go).
	NoBatching bool
	// Logger receives warnings and debug lines. It never receives tokens.
	// Default: zerolog.Nop().
	Logger *zerolog.Logger
}

func (o Options) withDefaults() Options {
	if o.DefaultTTL == 0 {
		o.DefaultTTL = 30 * time.Second
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = 60 * time.Second
	}
	if o.MaxWait == 0 {
		o.MaxWait = 60 * time.Second
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 50 * time.Millisecond
	}
	if o.DriftFactor == 0 {
		o.DriftFactor = 0.01
	} else if o.DriftFactor < 0 {
		o.DriftFactor = 0
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "redlockd:"
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = 50 * time.Millisecond
	}
	if o.PollInterval == 0 {
		o.PollInterval = 30 * time.Second
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = time.Second
	}
	if o.Logger == nil {
		nop := zerolog.Nop()
		o.Logger = &nop
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.MaxTTL < MinTTL:
		return invalid("max TTL %v is below the minimum %v", o.MaxTTL, MinTTL)
	case o.DefaultTTL < MinTTL || o.DefaultTTL > o.MaxTTL:
		return invalid("default TTL %v must be within [%v, %v]", o.DefaultTTL, MinTTL, o.MaxTTL)
	case o.MaxWait < 0:
		return invalid("max wait %v is negative", o.MaxWait)
	case o.NodeTimeout < 0:
		return invalid("node timeout %v is negative", o.NodeTimeout)
	case o.DriftFactor >= 0.5:
		return invalid("drift factor %v must be below 0.5", o.DriftFactor)
	case o.PollInterval < 0:
		return invalid("poll interval %v is negative", o.PollInterval)
	case o.HealthInterval < 0:
		return invalid("health interval %v is negative", o.HealthInterval)
	case o.RetryDelay < 0:
		return invalid("retry delay %v is negative", o.RetryDelay)
	}
	return nil
}

// AcquireOptions are the per-call options of Acquire.
type AcquireOptions struct {
	// Namespace separates tenants: the same resource in two namespaces is two
	// locks. Default: "" (the default namespace).
	Namespace string
	// TTL of the lock. Default: Options.DefaultTTL.
	TTL time.Duration
	// Wait is how long to keep trying while the lock is held. Default: 0,
	// one attempt round.
	Wait time.Duration
	// Token makes Acquire idempotent: if the lock is already held with this
	// token it is re-acquired with a fresh TTL and the same fence. Default: a
	// new random token.
	Token string
	// Owner is free text shown by Inspect.
	Owner string
}
