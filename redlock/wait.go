package redlock

import (
	"context"
	"errors"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Waiting acquires.
//
// A waiting Acquire joins a first-come-first-served queue per lock on this
// coordinator; only the head of the queue sends commands (of a semaphore's
// queue, the first limit waiters: one per permit). The head tries,
// and when the lock is held it sleeps until the first of:
//   - a release of that lock, announced by release.lua on a pub/sub channel
//     of every node (one subscription per node, not per lock or waiter); it
//     then waits for a quorum of nodes to report it, or 2ms, and tries again;
//   - the holder's remaining TTL, learned from the failed round, so that a
//     crashed holder's lock is taken as soon as it expires;
//   - a jittered fallback poll (Options.PollInterval), in case a message was
//     lost; a re-made subscription also wakes every head;
//   - the end of the wait or of ctx.
// When the head acquires the lock it leaves the queue and the next waiter
// tries at once: refused, its round asks the nodes to announce the release
// (release.lua publishes only for locks someone waits for).
//
// A lock on several resources (AcquireMulti) waits in the queue of each of
// them, and contends once it is a head of all (see join); the release of
// any of them wakes it.
//
// A writer's lock or a semaphore's permit released on this coordinator
// while one of its queue's heads here waits idle (in pause), a writer or a
// semaphore's waiter, is handed over to the first such head in the same
// round (handOver): the lock is never free in between. A head that is
// making a round is not handed one, nor is a waiter behind the heads (it
// would be served before them); a release that finds no idle head is
// announced as above, and so is a writer's lock that waiters of another
// coordinator wait for (see lock_handover.lua).

// acquireWaiting is Acquire with a wait (see the comment at the top). Most
// waiters of a busy lock sit behind the head for a long time, with this frame
// on their stack: so it keeps few locals and leaves the rounds to contend.
func (c *Coordinator) acquireWaiting(ctx context.Context, a *attempt, wait time.Duration) (lock Lock, err error) {
	start := time.Now()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	defer func() { c.obs.Waited(ctx, time.Since(start), err == nil) }()

	if c.hub.waiting(a.kind.queues(), 0) {
		if lock, ok := a.retried(ctx); ok {
			return lock, nil
		}
	}
	w := c.hub.join(c, a, a.kind.heads())
	c.obs.Waiting(ctx, 1) // after join: the count is of queued waiters
	defer c.obs.Waiting(ctx, -1)
	defer c.hub.leave(w)
	a.waiting = true
	a.until = start.Add(wait)

	// Once a head, try at once, unless the previous head here just took the
	// lock with the nodes asked to announce its release (see contend).
	got, err := c.queued(ctx, w, deadline)
	switch {
	case got != nil && got.err == nil:
		return c.handedOver(ctx, a, w, got)
	case err != nil:
		return Lock{}, err
	}
	return c.contend(ctx, a, w, deadline)
}

// handedOver returns the lock that a release handed over to the waiting
// acquire a, waiter w (see handOver), unless its caller went away meanwhile:
// then it gives the lock back, so that nobody holds it for its TTL, and
// returns ctx's error. A chosen token's lock stays: its caller may retry.
func (c *Coordinator) handedOver(ctx context.Context, a *attempt, w *waiter, got *handoff) (Lock, error) {
	if ctx.Err() == nil || a.chosen {
		// A hand-over leaves as many permits held, unless a release of
		// another permit woke w before it came: that permit is free, and
		// nobody else was woken for it, so the next head tries at once
		// instead of pausing behind a full semaphore.
		c.took(a, got.lock.Until, w.freed.Load() > 0, false)
		return got.lock, nil
	}
	c.bg.Go(func() { _ = a.kind.release(context.WithoutCancel(ctx), a, got.lock.Token) })
	return Lock{}, errors.Join(&HeldError{}, ctx.Err())
}

// took tells the hub that a head took a's lock, until until, and for a
// semaphore's permit whether that is known to leave the semaphore full
// (known, full: a round's answers tell; a hand-over leaves it as it was).
func (c *Coordinator) took(a *attempt, until time.Time, known, full bool) {
	if a.kind.heads() > 1 { // a semaphore's permit
		c.hub.tookPermit(a.kind.queues(), a.marked, known, full)
		return
	}
	c.hub.held(a.kind.queues(), until, true, a.heldMarked(), false)
}

// queued waits until w is a head, or its wait or ctx ends. A writer or a
// semaphore's waiter may be handed the lock meanwhile (see handOver): queued returns
// the outcome of a hand-over that succeeded, or that was under way when it
// stopped waiting.
func (c *Coordinator) queued(ctx context.Context, w *waiter, deadline *time.Timer) (got *handoff, err error) {
	c.hub.setPaused(w, true)
	defer func() {
		if c.hub.setPaused(w, false) && got == nil {
			h := <-w.offer
			got = &h
		}
	}()
	for {
		select {
		case <-w.head:
			return nil, nil
		case h := <-w.offer:
			if h.err == nil {
				return &h, nil
			}
			c.hub.setPaused(w, true) // failed: it may be claimed again
		case <-ctx.Done():
			return nil, errors.Join(&HeldError{}, ctx.Err())
		case <-deadline.C:
			return nil, &HeldError{}
		}
	}
}

// contend makes rounds for the head waiter w until it takes the lock or the
// wait ends, pausing between refused rounds. A new head whose predecessor
// here took the lock marked as waited for (see waitHub.held), or took a
// permit (handed over, or by a round) that left its semaphore full (see
// waitHub.tookPermit), pauses first, until a release is announced or handed
// over to it, or the lock (the permit that expires first) expires: a round
// would only be refused.
func (c *Coordinator) contend(ctx context.Context, a *attempt, w *waiter, deadline *time.Timer) (lock Lock, err error) {
	sleep := c.hub.heldMarked(a.kind.queues()) // before the next round; 0: at once
	var ranAt time.Time                        // when the last round ended
	for {
		if sleep > 0 {
			done, got, werr := c.pause(ctx, w, sleep, deadline)
			if got != nil && got.err == nil {
				return c.handedOver(ctx, a, w, got)
			}
			if werr != nil {
				a.abandon(ctx)
				return Lock{}, errors.Join(err, werr)
			}
			if done {
				a.abandon(ctx)
				if err == nil { // no round yet: paused behind a holder from the start
					return Lock{}, &HeldError{Remaining: c.hub.busyFor(a.kind.queues())}
				}
				// The holder's remaining TTL as of now, not of the round.
				if he := (*HeldError)(nil); errors.As(err, &he) && he.Remaining > 0 {
					he.Remaining = max(he.Remaining-time.Since(ranAt), time.Millisecond)
				}
				return Lock{}, err
			}
		}
		w.drain()
		if p := w.freed.Swap(0); p > 0 {
			a.kind.freed(int(p) - 1)
		}
		lock, err = a.run(ctx)
		ranAt = time.Now()
		if err == nil {
			c.took(a, lock.Until, true, a.kind.full())
			return lock, nil
		}
		if he := (*HeldError)(nil); errors.As(err, &he) && he.Remaining > 0 {
			c.hub.held(a.kind.queues(), ranAt.Add(he.Remaining), false, false, a.kind.full())
		} else {
			c.hub.notFull(a.kind.queues()) // a failed round tells nothing
		}
		if errors.Is(err, ErrLimitMismatch) { // waiting cannot change it
			a.abandon(ctx)
			return Lock{}, err
		}
		if ctx.Err() != nil {
			a.abandon(ctx)
			return Lock{}, errors.Join(err, ctx.Err())
		}
		sleep = jitter(c.opts.RetryDelay) // split votes, silent nodes
		if he := (*HeldError)(nil); errors.As(err, &he) {
			sleep = jitter(c.opts.PollInterval) // until a release, or the fallback poll
			if he.Remaining > 0 {
				sleep = min(sleep, he.Remaining+time.Millisecond)
			}
			if a.kind.again() { // another permit is free
				sleep = jitter(c.opts.RetryDelay)
			}
		}
	}
}

// pause sleeps until a release of w's lock is announced by a quorum of nodes
// (or 2ms after the first announcement), or for d. It returns done when the
// wait is over, or ctx's error; and the outcome of a hand-over, if a release
// claimed w meanwhile (which it then waits for).
func (c *Coordinator) pause(ctx context.Context, w *waiter, d time.Duration, deadline *time.Timer) (done bool, got *handoff, err error) {
	c.hub.setPaused(w, true)
	defer func() {
		if c.hub.setPaused(w, false) && got == nil {
			h := <-w.offer
			got = &h
		}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	var seen uint64 // nodes that announced a release, as bits
	var gather <-chan time.Time
	for {
		select {
		case node := <-w.wake:
			if node < 0 { // subscription re-made: messages may be lost
				return false, nil, nil
			}
			seen |= 1 << node
			if bits.OnesCount64(seen) >= c.quorum {
				return false, nil, nil
			}
			if gather == nil {
				g := time.NewTimer(2 * time.Millisecond)
				defer g.Stop()
				gather = g.C
			}
		case <-gather:
			return false, nil, nil
		case h := <-w.offer:
			return false, &h, nil
		case <-t.C:
			return false, nil, nil
		case <-deadline.C:
			return true, nil, nil
		case <-ctx.Done():
			return false, nil, ctx.Err()
		}
	}
}

// waiter is one waiting Acquire in a queue, or in one queue per resource
// (AcquireMulti).
type waiter struct {
	keys []string // its queues' keys
	// behind is how many of its queues it is not a head of yet; it
	// contends once it is a head of all. Guarded by the hub's mu.
	behind int
	own    string        // fingerprint of its token: its own releases do not wake it
	wake   chan int      // node index per release announcement; -1: resubscribed
	head   chan struct{} // one value when it becomes the head
	// freed is 1 + the permit of a semaphore whose release woke it last.
	freed atomic.Int64
	// wokenBy is the fingerprint of the release that woke it last: the
	// other nodes' announcements of that release wake it too, not another
	// head of a semaphore. Guarded by the hub's mu.
	wokenBy string

	// A writer or a semaphore's head may be handed the lock by a release on this
	// coordinator (see handOver) while it waits idle (in pause, or just
	// made a head and not yet out of the queue's wait): a is its attempt,
	// paused says it waits idle,
	// claimed that a hand-over runs for it (both guarded by the hub's mu),
	// and offer brings that hand-over's outcome.
	a       *attempt
	paused  bool
	claimed bool
	offer   chan handoff
}

// handoff is the outcome of a hand-over for a waiter.
type handoff struct {
	lock Lock
	err  error
}

// drain drops stale wake-ups.
func (w *waiter) drain() {
	for {
		select {
		case <-w.wake:
		default:
			return
		}
	}
}

// interest tells acquire.lua whether to ask for release announcements: 0
// no (nobody waits), 1 when refused (this acquire will wait), 2 also when
// granted (others wait behind it here).
func (a *attempt) interest() int {
	switch {
	case !a.waiting:
		return 0
	case a.c.hub.waiting(a.kind.queues(), 1):
		return 2
	}
	return 1
}

// wwait is what is left of a waiting writer's wait, in ms: a refused round
// keeps new readers out for at most that long (see acquire.lua); 0 for
// others.
func (a *attempt) wwait() int64 {
	if !a.waiting || len(a.kind.wwaits()) == 0 {
		return 0
	}
	return max(time.Until(a.until).Milliseconds(), 1)
}

// heldMarked tells that a's lock, taken by its last round, keeps out every
// waiter queued behind a (a writer's, or a semaphore's of limit 1: not a
// reader's, nor one of several permits) and was marked as waited for (see
// waitHub.held).
func (a *attempt) heldMarked() bool {
	return a.marked && a.kind.mode() == ModeWrite && a.kind.heads() == 1
}

// jitter returns a duration uniformly in [d/2, 3d/2).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d)
}
