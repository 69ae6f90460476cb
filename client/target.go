package client

import (
	"context"
	"fmt"
	"time"
)

// Target is what a Hold holds: a WriteLock, a ReadLock, Locks (the write
// locks of several resources) or a SemaphorePermit. Each kind is one
// implementation of the three calls of a hold.
type Target interface {
	// acquire takes the target with token, letting the gateway wait up to wait.
	acquire(ctx context.Context, c *Client, token string, o HoldOptions, wait time.Duration) (lease, error)
	// extend makes the target held with token valid for ttl from now.
	extend(ctx context.Context, c *Client, token string, ttl time.Duration) (lease, error)
	// release releases the target held with token.
	release(ctx context.Context, c *Client, token string) error
	// String names the target, for messages.
	String() string
}

// lease is one acquire's or extension's answer, as every kind has it.
type lease struct {
	Start, Until time.Time // Until = Start + validity, on this machine's monotonic clock
	TTL          time.Duration
	Fences       []int64 // one per resource; one for a lock or a permit
	Permit       int     // a permit's index; 0 otherwise
}

func leaseOf(l Lock) lease {
	return lease{Start: l.Start, Until: l.Until, TTL: l.TTL, Fences: []int64{l.Fence}}
}

// WriteLock is the exclusive lock of Resource.
type WriteLock struct{ Resource string }

func (t WriteLock) acquire(ctx context.Context, c *Client, token string, o HoldOptions, wait time.Duration) (lease, error) {
	l, err := c.Acquire(ctx, t.Resource, AcquireOptions{TTL: o.TTL, Wait: wait, Token: token, Owner: o.Owner, Mode: ModeWrite})
	return leaseOf(l), err
}

func (t WriteLock) extend(ctx context.Context, c *Client, token string, ttl time.Duration) (lease, error) {
	l, err := c.Extend(ctx, t.Resource, token, ttl)
	return leaseOf(l), err
}

func (t WriteLock) release(ctx context.Context, c *Client, token string) error {
	return c.Release(ctx, t.Resource, token)
}

func (t WriteLock) String() string { return fmt.Sprintf("lock %q", t.Resource) }

// ReadLock is a read lock of Resource, shared with other readers; a writer
// that waits keeps new readers out. Its fence is the last writer's.
type ReadLock struct{ Resource string }

func (t ReadLock) acquire(ctx context.Context, c *Client, token string, o HoldOptions, wait time.Duration) (lease, error) {
	l, err := c.Acquire(ctx, t.Resource, AcquireOptions{TTL: o.TTL, Wait: wait, Token: token, Owner: o.Owner, Mode: ModeRead})
	return leaseOf(l), err
}

// A reader extends and releases as a writer does.

func (t ReadLock) extend(ctx context.Context, c *Client, token string, ttl time.Duration) (lease, error) {
	return WriteLock(t).extend(ctx, c, token, ttl)
}

func (t ReadLock) release(ctx context.Context, c *Client, token string) error {
	return WriteLock(t).release(ctx, c, token)
}

func (t ReadLock) String() string { return fmt.Sprintf("read lock %q", t.Resource) }

// Locks are the write locks of every one of Resources, taken all or none
// (AcquireMulti): Hold.Fences lists their fences in the same order.
type Locks struct{ Resources []string }

func (t Locks) acquire(ctx context.Context, c *Client, token string, o HoldOptions, wait time.Duration) (lease, error) {
	m, err := c.AcquireMulti(ctx, t.Resources, AcquireOptions{TTL: o.TTL, Wait: wait, Token: token, Owner: o.Owner})
	return leaseOfMulti(m), err
}

func (t Locks) extend(ctx context.Context, c *Client, token string, ttl time.Duration) (lease, error) {
	m, err := c.ExtendMulti(ctx, t.Resources, token, ttl)
	return leaseOfMulti(m), err
}

func (t Locks) release(ctx context.Context, c *Client, token string) error {
	return c.ReleaseMulti(ctx, t.Resources, token)
}

func (t Locks) String() string { return fmt.Sprintf("locks %q", t.Resources) }

func leaseOfMulti(m MultiLock) lease {
	return lease{Start: m.Start, Until: m.Until, TTL: m.TTL, Fences: m.Fences}
}

// SemaphorePermit is one of the Limit permits of the semaphore Name; every
// holder of the semaphore must give the same Limit. Hold.Permit tells which.
type SemaphorePermit struct {
	Name  string
	Limit int
}

func (t SemaphorePermit) acquire(ctx context.Context, c *Client, token string, o HoldOptions, wait time.Duration) (lease, error) {
	p, err := c.AcquirePermit(ctx, t.Name, PermitOptions{Limit: t.Limit, TTL: o.TTL, Wait: wait, Token: token, Owner: o.Owner})
	return leaseOfPermit(p), err
}

func (t SemaphorePermit) extend(ctx context.Context, c *Client, token string, ttl time.Duration) (lease, error) {
	p, err := c.ExtendPermit(ctx, t.Name, token, ttl)
	return leaseOfPermit(p), err
}

func (t SemaphorePermit) release(ctx context.Context, c *Client, token string) error {
	return c.ReleasePermit(ctx, t.Name, token)
}

func (t SemaphorePermit) String() string { return fmt.Sprintf("semaphore %q", t.Name) }

func leaseOfPermit(p Permit) lease {
	l := leaseOf(p.Lock)
	l.Permit = p.Index
	return l
}
