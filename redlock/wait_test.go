package redlock

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// eventually polls cond until it holds or limit passes.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// awaitSubscribed waits until every node of c has a subscriber on c's
// release channel: New subscribes in the background, and a release announced
// before that is not heard (a waiter then sleeps until its fallback poll).
func awaitSubscribed(t *testing.T, c *Coordinator) {
	t.Helper()
	eventually(t, patience, "the release subscriptions", func() bool {
		for _, n := range c.nodes {
			subs, err := n.client.PubSubNumSub(t.Context(), c.released).Result()
			if err != nil || subs[c.released] < 1 {
				return false
			}
		}
		return true
	})
}

// waitOpts make the fallback poll and retries too slow to matter: only a
// release announcement or the holder's TTL can wake a waiter in time.
var waitOpts = Options{PollInterval: time.Minute}

func TestWaitWakesOnRelease(t *testing.T) {
	cl := newCluster(t, 5, waitOpts)
	ctx := t.Context()
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var acquiredAt time.Time
	go func() {
		_, err := cl.c.Acquire(ctx, res, AcquireOptions{Wait: 20 * time.Second})
		acquiredAt = time.Now()
		got <- err
	}()
	// Its first round refused (Held counts refused rounds; the holder's
	// acquire was granted): it now waits for the release. An announcement
	// that comes before it is asleep waits in its buffered wake channel.
	eventually(t, patience, "the waiter's first round to be refused", func() bool {
		s := cl.c.Stats()
		return s.Waiting == 1 && s.Held == 1
	})
	awaitSubscribed(t, cl.c)
	before := cl.c.Stats().Attempts
	released := time.Now()
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// Neither the TTL (30s) nor the poll (1m) can have woken it.
	if d := acquiredAt.Sub(released); d > patience {
		t.Fatalf("waiter took %v after the release", d)
	}
	// Woken by the announcements, not retrying on its own: one round, or
	// on a loaded box a few. The nodes delete the lock at slightly
	// different times, and a waiter that wakes 2ms after the first
	// announcement (see pause) may still find a quorum held and try again
	// at the next announcements.
	if n := cl.c.Stats().Attempts - before; n < 1 || n > 3 {
		t.Fatalf("waiter needed %d rounds after the release, want 1 (up to 3 on a loaded box)", n)
	}
}

func TestWaitCrossCoordinator(t *testing.T) {
	cl := newCluster(t, 3, waitOpts)
	ctx := t.Context()
	other := cl.gateway(t)
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := other.Acquire(ctx, res, AcquireOptions{Wait: 20 * time.Second})
		got <- err
	}()
	eventually(t, patience, "the waiter to wait", func() bool { return other.Stats().Held == 1 })
	awaitSubscribed(t, other)
	released := time.Now()
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter on the other coordinator: %v", err)
	}
	if d := time.Since(released); d > patience {
		t.Fatalf("cross-coordinator wake-up took %v", d)
	}
}

func TestWaitAfterExpiry(t *testing.T) {
	cl := newCluster(t, 3, waitOpts)
	ctx := t.Context()
	res := uniq(t)
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Wait: 20 * time.Second}); err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// The holder never released: the waiter slept until its TTL ran out,
	// not until the poll (1m).
	if d := time.Since(start); d < 400*time.Millisecond || d > patience {
		t.Fatalf("acquired %v after a 500ms lock was taken", d)
	}
	if n := cl.c.Stats().Attempts; n > 4 {
		t.Fatalf("%d rounds for one expiry: the waiter polled", n)
	}
}

func TestWaitFIFO(t *testing.T) {
	cl := newCluster(t, 3, waitOpts)
	ctx := t.Context()
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := cl.c.Acquire(ctx, res, AcquireOptions{Wait: 20 * time.Second, TTL: 10 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
				t.Error(err)
			}
		}()
		eventually(t, patience, "waiter to queue", func() bool { return cl.c.Stats().Waiting == int64(i+1) })
	}
	// A newcomer without a wait does not jump the queue.
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{}); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("newcomer err = %v", err)
	}
	awaitSubscribed(t, cl.c)
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("served in order %v, want first come first served", order)
		}
	}
	if len(order) != n {
		t.Fatalf("served %d of %d", len(order), n)
	}
	// Only the head sends commands: the holder's round, the newcomer's, and
	// at most two per waiter (one at once on becoming the head, refused if
	// the previous head still holds the lock, and the winning one).
	if s := cl.c.Stats(); s.Attempts > 1+1+2*n || s.SplitVotes != 0 {
		t.Fatalf("stats %+v: waiters behind the head sent commands", s)
	}
}

func TestWaitCancelCleansUp(t *testing.T) {
	cl := newCluster(t, 3, waitOpts)
	ctx := t.Context()
	res := uniq(t)
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var cancelled atomic.Int64
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cl.c.Acquire(wctx, res, AcquireOptions{Wait: 20 * time.Second})
			// Held, or unavailable for the head cut off in the middle of a round.
			if errors.Is(err, context.Canceled) && (errors.Is(err, ErrLockHeld) || errors.Is(err, ErrQuorumUnavailable)) {
				cancelled.Add(1)
			}
		}()
	}
	eventually(t, patience, "100 waiters", func() bool { return cl.c.Stats().Waiting == 100 })
	cancel()
	wg.Wait()
	if cancelled.Load() != 100 {
		t.Fatalf("%d of 100 waiters reported the cancellation", cancelled.Load())
	}
	if cl.c.Stats().Waiting != 0 || cl.c.hub.waiters(cl.c.lockKeysOf("", res).Lock) > 0 {
		t.Fatal("cancelled waiters left in the queue")
	}
	// A leak would be 100 goroutines or more; the clients' pools may have
	// opened a few connections meanwhile.
	eventually(t, patience, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base+20 })
	// A timed-out waiter leaves the queue too.
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Wait: 50 * time.Millisecond}); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("timed-out waiter err = %v", err)
	}
	if cl.c.hub.waiters(cl.c.lockKeysOf("", res).Lock) > 0 {
		t.Fatal("timed-out waiter left in the queue")
	}
}

// TestWaitNoBusyPolling: a waiter on a long-held lock sends almost nothing.
func TestWaitNoBusyPolling(t *testing.T) {
	cl := newCluster(t, 3, waitOpts)
	ctx := t.Context()
	res := uniq(t)
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	before := cl.c.Stats().Attempts
	_, err := cl.c.Acquire(wctx, res, AcquireOptions{Wait: 20 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if n := cl.c.Stats().Attempts - before; n != 1 {
		t.Fatalf("a waiter sent %d rounds in 1s on a lock held for 30s, want 1", n)
	}
}

// TestWaitHandOffToLaterWaiters: waiters that queue after the holder took
// the lock (so nobody had asked for release announcements yet) still wake at
// once when it is released.
func TestWaitHandOffToLaterWaiters(t *testing.T) {
	cl := newCluster(t, 3, waitOpts)
	ctx := t.Context()
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 2)
	for i := range 2 {
		go func() {
			l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second, Wait: 20 * time.Second})
			if err == nil {
				err = cl.c.Release(ctx, "", res, l.Token)
			}
			got <- err
		}()
		eventually(t, patience, "waiter to queue", func() bool { return cl.c.Stats().Waiting == int64(i+1) })
	}
	// The head's first round refused (the holder's was granted): it waits
	// for the release.
	eventually(t, patience, "the head's first round to be refused", func() bool { return cl.c.Stats().Held == 1 })
	awaitSubscribed(t, cl.c)
	released := time.Now()
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	// Neither the holders' TTL (30s) nor the poll (1m) can have woken them.
	if d := time.Since(released); d > patience {
		t.Fatalf("two hand-offs took %v", d)
	}
}
