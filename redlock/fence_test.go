package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// dropLock deletes resource's lock key and record on the servers idxs, as
// if the lock had expired there.
func (cl *cluster) dropLock(t *testing.T, resource string, idxs ...int) {
	t.Helper()
	for _, i := range idxs {
		c := cl.servers[i].Client()
		if err := c.Del(context.Background(), "redlockd:lock:/"+resource, "redlockd:meta:/"+resource).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReacquireAfterLossGetsNewFence: a token that lost the lock (it lives
// on a minority) and re-acquires after another holder is a new acquisition
// with a greater fence, not its old one.
func TestReacquireAfterLossGetsNewFence(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	tok := NewToken() + "client"
	t1, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cl.dropLock(t, res, 2, 3, 4) // T's lock expired on 3 nodes, lives on 2
	v, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil || v.Fence <= t1.Fence {
		t.Fatalf("V's acquire = %+v, %v; want a fence above %d", v, err, t1.Fence)
	}
	if err := cl.c.Release(ctx, "", res, v.Token); err != nil {
		t.Fatal(err)
	}
	t2, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if t2.Fence <= v.Fence {
		t.Fatalf("T's re-acquire fence %d, want above V's %d (T's first was %d)", t2.Fence, v.Fence, t1.Fence)
	}
	// The new fence is committed everywhere, so a further re-acquire keeps it.
	t3, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil || t3.Fence != t2.Fence {
		t.Fatalf("second re-acquire = %+v, %v; want fence %d", t3, err, t2.Fence)
	}
	if info, err := cl.c.Inspect(ctx, "", res); err != nil || info.Fence != t2.Fence {
		t.Fatalf("inspect = %+v, %v; want fence %d", info, err, t2.Fence)
	}
}

// TestReacquireIgnoresStaleRecords: records a failed attempt left on a
// quorum (SETs that landed late, with only the nodes' tentative fences) do
// not let a re-acquire keep the old fence of the one node still holding the
// token's earlier lock.
func TestReacquireIgnoresStaleRecords(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	tok := NewToken() + "client"
	// Counters that disagree: T's fence is written back beside its lock.
	if err := cl.servers[4].Client().Set(ctx, "redlockd:fence:/"+res, 10, 0).Err(); err != nil {
		t.Fatal(err)
	}
	t1, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cl.dropLock(t, res, 1, 2, 3, 4) // T's lock lives on node 0 only
	v, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.c.Release(ctx, "", res, v.Token); err != nil {
		t.Fatal(err)
	}
	cl.settle() // V's release done everywhere
	// A failed attempt of T: node 0 existing, nodes 1 and 2 silent, 3 and 4
	// down; its SETs land late on 1 and 2.
	cl.setDown(0b11110)
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok}); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("attempt with 4 down err = %v", err)
	}
	cl.setDown(0)
	for _, i := range []int{1, 2} {
		if _, err := scriptAcquire.Run(ctx, cl.servers[i].Client(), cl.c.keys("", res), tok, 10000, "", 0).Result(); err != nil {
			t.Fatal(err)
		}
	}
	if got := cl.holders(t, res, tok); got != 3 {
		t.Fatalf("holders of T = %d, want 3", got)
	}
	t2, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if t2.Fence <= v.Fence {
		t.Fatalf("T's re-acquire fence %d, want above V's %d (T's first was %d)", t2.Fence, v.Fence, t1.Fence)
	}
}

// TestReleaseIdempotent: a retried release succeeds for max TTL after the
// release, even once another token took the lock; a token that never held
// it is refused, and the tombstones expire.
func TestReleaseIdempotent(t *testing.T) {
	cl := newCluster(t, 5, Options{MaxTTL: time.Second, DefaultTTL: time.Second})
	ctx := t.Context()
	res := uniq(t)
	cl.c.Warm(ctx, time.Second) // the scripts loaded: a lost NOSCRIPT would hide the EVAL
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A release whose answer was lost: it ran on every node.
	for _, h := range cl.hooks {
		h.lost.Store(true)
	}
	if err := cl.c.Release(ctx, "", res, l.Token); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("release with lost replies err = %v", err)
	}
	cl.settle() // every node's command met the fault
	for _, h := range cl.hooks {
		h.lost.Store(false)
	}
	if got := cl.holders(t, res, ""); got != 0 {
		t.Fatalf("holders after the lost release = %d", got)
	}
	start := time.Now()
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatalf("retried release err = %v, want nil", err)
	}
	other, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatalf("retried release while another holds the lock err = %v, want nil", err)
	}
	cl.settle()
	if got := cl.holders(t, res, other.Token); got != 5 {
		t.Fatalf("the retried release touched the new holder's lock: holders %d", got)
	}
	if err := cl.c.Release(ctx, "", res, NewToken()); !errors.Is(err, ErrHeldByOther) {
		t.Fatalf("release by a token that never held it err = %v, want ErrHeldByOther", err)
	}
	if err := cl.c.Release(ctx, "", res, other.Token); err != nil {
		t.Fatal(err)
	}
	// An undone attempt leaves no tombstone: its token never held the lock.
	cl.setDown(0b11100)
	tok := NewToken() + "client"
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok}); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("attempt with 3 down err = %v", err)
	}
	cl.setDown(0)
	if err := cl.c.Release(ctx, "", res, tok); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("release of an undone attempt err = %v, want ErrLockExpired", err)
	}
	// After max TTL the first token's tombstones are gone.
	time.Sleep(time.Until(start.Add(time.Second + 200*time.Millisecond)))
	if err := cl.c.Release(ctx, "", res, l.Token); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("release after max TTL err = %v, want ErrLockExpired", err)
	}
}
