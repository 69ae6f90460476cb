package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redlockd/redlockd/internal/valid"
)

// Semaphores (docs/semaphores.md): at most Limit holders at once. Each permit i of a
// semaphore S is a lock of its own (S#i), so two holders of one permit
// conflict pairwise and Redlock's quorum argument holds per permit; the
// permits share one fence counter (fencing tokens increase across every
// permit of S) and one queue of waiters (a release of any permit wakes it).

// MaxLimit is the largest limit of a semaphore.
const MaxLimit = valid.MaxLimit

// ErrLimitMismatch means the semaphore's permits are held with another
// limit. The returned error is a *LimitError.
var ErrLimitMismatch = errors.New("redlock: the semaphore's permits are held with another limit")

// LimitError is returned by AcquirePermit when the permits held have another
// limit than the one asked for.
type LimitError struct {
	Limit int // the limit of the permits held
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v (%d)", ErrLimitMismatch, e.Limit)
}

// Unwrap returns ErrLimitMismatch.
func (e *LimitError) Unwrap() error { return ErrLimitMismatch }

// PermitOptions are AcquirePermit's options: those of a lock, and the limit.
type PermitOptions struct {
	AcquireOptions
	// Limit is the number of permits, 1..MaxLimit. Required.
	Limit int
}

// Permit is a permit of a semaphore acquired or extended on a quorum of
// nodes: a Lock whose Resource is the semaphore's name, with the limit and
// the permit's index. Fence is strictly greater than every fence handed out
// before for any permit of the semaphore.
type Permit struct {
	Lock
	Limit int
	Index int // 0..Limit-1
}

// SemaphoreInfo is what InspectSemaphore tells: the permits held on a
// quorum, never their tokens.
type SemaphoreInfo struct {
	Namespace, Name string
	Limit           int          // the limit of the permits held; 0 when none is
	Permits         []PermitInfo // by index
}

// PermitInfo is one held permit.
type PermitInfo struct {
	Index     int
	Owner     string
	Fence     int64
	Remaining time.Duration
	HeldNodes int
}

// acquireOnce is AcquirePermit without a wait: a round, and at most two
// more when the refusals show another permit that can be granted at once.
func (c *Coordinator) acquirePermitOnce(ctx context.Context, a *attempt) (Lock, error) {
	if lock, done, err := a.queued(ctx); done {
		return lock, err
	}
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			a.abandon(ctx)
			return Lock{}, errors.Join(ErrQuorumUnavailable, err)
		}
		lock, err := a.run(ctx)
		if err == nil {
			return lock, nil
		}
		if i == 2 || !a.kind.again() || !errors.Is(err, ErrLockHeld) {
			a.abandon(ctx)
			if ctx.Err() != nil {
				err = errors.Join(err, ctx.Err())
			}
			return Lock{}, err
		}
	}
}

// AcquirePermit takes a permit of the semaphore name, trying again while
// o.Wait lasts (waiting acquires are served first come, first served, and
// woken by the release of any permit). May return ErrInvalid, a *HeldError
// (ErrLockHeld: every permit is held), a *LimitError (ErrLimitMismatch) or
// ErrQuorumUnavailable.
func (c *Coordinator) AcquirePermit(ctx context.Context, name string, o PermitOptions) (Permit, error) {
	if o.Limit < 1 || o.Limit > MaxLimit {
		return Permit{}, invalid("limit must be within [1, %d]", MaxLimit)
	}
	a, err := c.newAttempt(name, o.AcquireOptions)
	if err != nil {
		return Permit{}, err
	}
	if o.Mode == ModeRead {
		return Permit{}, invalid("a semaphore has no read mode")
	}
	pk := &permitKind{k: c.semaphoreKeysOf(o.Namespace, name), limit: o.Limit, prefer: rand.N(o.Limit)}
	a.kind = pk
	var lock Lock
	if o.Wait == 0 {
		lock, err = c.acquirePermitOnce(ctx, a)
	} else {
		lock, err = c.acquireWaiting(ctx, a, o.Wait)
	}
	if err != nil {
		return Permit{}, err
	}
	return Permit{Lock: lock, Limit: o.Limit, Index: pk.prefer}, nil
}

// ExtendPermit makes the permit held with token valid for ttl from now
// (DefaultTTL when 0). May return ErrInvalid, ErrLockExpired (the permit is
// lost) or ErrQuorumUnavailable.
func (c *Coordinator) ExtendPermit(ctx context.Context, namespace, name, token string, ttl time.Duration) (Permit, error) {
	return c.extend(ctx, permitTarget{k: c.semaphoreKeysOf(namespace, name)}, namespace, name, token, ttl)
}

// ReleasePermit releases the permit held with token; idempotent as Release.
// When an acquire of this coordinator waits for a permit of the semaphore,
// the permit is handed over to it in the same round (see handOver). May
// return ErrInvalid, ErrLockExpired or ErrQuorumUnavailable.
func (c *Coordinator) ReleasePermit(ctx context.Context, namespace, name, token string) error {
	if err := c.checkName(namespace, name, token); err != nil {
		return err
	}
	keys := c.semaphoreKeysOf(namespace, name)
	if w := c.hub.claim(keys.queue(), fingerprint(token)); w != nil {
		return c.handOver(ctx, scriptPermitHandover, keys.handOver(), token, w)
	}
	return c.release(ctx, permitTarget{k: keys}, token)
}
