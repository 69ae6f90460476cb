package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Coordinator runs the Redlock algorithm over N independent Redis masters.
// It is safe for concurrent use.
type Coordinator struct {
	opts   Options
	quorum int
}

// New returns a Coordinator over one client per node, made from the given
// go-redis options (their timeouts and retries are overridden so that each
// command is bounded by Options.NodeTimeout). It validates opts once.
// May return ErrInvalid.
func New(nodes []*redis.Options, opts Options) (*Coordinator, error) {
	return nil, errors.New("not implemented")
}

// Acquire takes the lock on resource. May return ErrInvalid, a *HeldError
// (ErrLockHeld) or ErrQuorumUnavailable, joined with ctx.Err() when the
// context ended the wait.
func (c *Coordinator) Acquire(ctx context.Context, resource string, o AcquireOptions) (Lock, error) {
	return Lock{}, errors.New("not implemented")
}

// Release deletes the lock on every node where token holds it. May return
// ErrInvalid, ErrLockExpired, ErrHeldByOther or ErrQuorumUnavailable.
func (c *Coordinator) Release(ctx context.Context, namespace, resource, token string) error {
	return errors.New("not implemented")
}

// Extend makes the lock valid for ttl from now (DefaultTTL when ttl is 0).
// May return ErrInvalid, ErrLockExpired, ErrHeldByOther or ErrQuorumUnavailable.
func (c *Coordinator) Extend(ctx context.Context, namespace, resource, token string, ttl time.Duration) (Lock, error) {
	return Lock{}, errors.New("not implemented")
}

// Inspect tells who holds the lock. May return ErrInvalid, ErrNotHeld or
// ErrQuorumUnavailable.
func (c *Coordinator) Inspect(ctx context.Context, namespace, resource string) (Info, error) {
	return Info{}, errors.New("not implemented")
}

// Status pings every node in parallel and reports its health.
func (c *Coordinator) Status(ctx context.Context) []NodeStatus { return nil }

// Nodes is the number of nodes N.
func (c *Coordinator) Nodes() int { return 0 }

// Quorum is the number of nodes needed: N/2 + 1.
func (c *Coordinator) Quorum() int { return c.quorum }

// Options returns the effective options, defaults filled in.
func (c *Coordinator) Options() Options { return c.opts }

// Close closes every node's client.
func (c *Coordinator) Close() error { return nil }
