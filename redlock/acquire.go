package redlock

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"
)

// Acquire takes the lock on resource (o.Mode: a writer's, or a reader's),
// trying again after a jittered delay while o.Wait lasts. May return ErrInvalid, a *HeldError (ErrLockHeld) or
// ErrQuorumUnavailable, joined with ctx.Err() when the context ended the wait.
func (c *Coordinator) Acquire(ctx context.Context, resource string, o AcquireOptions) (Lock, error) {
	a, err := c.newAttempt(resource, o)
	if err != nil {
		return Lock{}, err
	}
	if o.Wait == 0 {
		return c.acquireOnce(ctx, a)
	}
	return c.acquireWaiting(ctx, a, o.Wait)
}

// newAttempt checks o and resource and returns the attempt to take the lock.
func (c *Coordinator) newAttempt(resource string, o AcquireOptions) (*attempt, error) {
	if err := c.checkName(o.Namespace, resource); err != nil {
		return nil, err
	}
	ttl, err := c.ttlOrDefault(o.TTL)
	if err != nil {
		return nil, err
	}
	if o.Wait < 0 || o.Wait > c.opts.MaxWait {
		return nil, invalid("wait must be within [0, %d] ms", c.opts.MaxWait.Milliseconds())
	}
	if o.Token != "" && !ValidToken(o.Token) {
		return nil, invalid(errToken)
	}
	if utf8.RuneCountInString(o.Owner) > MaxOwnerLen {
		return nil, invalid("owner must be at most %d characters", MaxOwnerLen)
	}
	if o.Mode != "" && o.Mode != ModeWrite && o.Mode != ModeRead {
		return nil, invalid("mode must be read or write")
	}
	a := &attempt{c: c, ns: o.Namespace, resource: resource,
		token: o.Token, chosen: o.Token != "", ttl: ttl, owner: o.Owner}
	if l := (lockKind{k: c.lockKeysOf(o.Namespace, resource)}); o.Mode == ModeRead {
		a.kind = readerKind{l}
	} else {
		a.kind = writerKind{l}
	}
	if !a.chosen {
		a.token = NewToken()
	}
	return a, nil
}

// acquireOnce is Acquire without a wait: one round.
func (c *Coordinator) acquireOnce(ctx context.Context, a *attempt) (Lock, error) {
	if lock, done, err := a.queued(ctx); done {
		return lock, err
	}
	if err := ctx.Err(); err != nil {
		return Lock{}, errors.Join(ErrQuorumUnavailable, err)
	}
	a.left.state = lastRound // before any round: nothing else reads it yet
	lock, err := a.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return lock, err
}

// queued answers an acquire without a wait when others are waiting for
// the lock on this coordinator (done): the lock is theirs first, so it is
// refused, with how long the lock stays held as the waiters last learned;
// but the retry of an acquire whose lock its client token holds already is
// no new acquire, and gets its lock (see retried).
func (a *attempt) queued(ctx context.Context) (lock Lock, done bool, err error) {
	c := a.c
	if !c.hub.waiting(a.kind.queues(), 0) {
		return Lock{}, false, nil
	}
	if lock, ok := a.retried(ctx); ok {
		return lock, true, nil
	}
	c.obs.Decided(ctx, Decision{Outcome: OutcomeHeld})
	return Lock{}, true, &HeldError{Remaining: c.hub.busyFor(a.kind.queues())}
}

// retried recognises the retry of an acquire whose lock its client token
// holds already (its answer was lost): before any queueing, so that others
// waiting for the lock on this coordinator neither refuse it nor make it
// wait behind them while its own lock runs out. It re-acquires the lock as
// an extend does, with the acquire's TTL: the same fence, valid for ttl
// from now. It is false when a's token is random, or does not hold the lock
// as asked (another mode, another limit), or the nodes cannot tell: the
// acquire then goes on as any other. Callers ask only while others wait
// here: otherwise the acquire's own round re-acquires it.
func (a *attempt) retried(ctx context.Context) (Lock, bool) {
	if !a.chosen {
		return Lock{}, false
	}
	lock, ok := a.kind.retried(ctx, a)
	if ok {
		a.c.obs.Decided(ctx, Decision{Outcome: OutcomeAcquired})
	}
	return lock, ok
}

// attempt is one lock being acquired: the same token for every round.
type attempt struct {
	c        *Coordinator
	ns       string
	resource string
	kind     kind
	token    string
	chosen   bool // the caller chose the token (idempotent acquire)
	// waiting is set for a waiting acquire: its rounds ask the nodes to
	// announce the lock's release (see interest).
	waiting bool
	until   time.Time // when a waiting acquire's wait ends
	// marked: its last round (or hand-over) asked the nodes to mark the
	// lock as waited for if granted (interest 2): its release is announced.
	marked bool
	ttl    time.Duration
	owner  string
	left   leftovers // what its failed rounds may have left (see cleanup)
}

// acqTally counts the answers of an acquire round.
type acqTally struct {
	votes
	a                  *attempt
	tg                 target     // the round's (a semaphore's: with its permit)
	newFence           int64      // the greatest fence of a fresh node, or counter+1 of an existing one
	minFence, maxFence int64      // over every grant, voting or not
	existing           []acqReply // voting nodes where the token held the lock already
	anyExisting        bool       // a grant, voting or not, of a token that held the lock already
	pttls              []int64
	answered           []int // nodes that answered (the fence commit goes to them)
	granted            []int // nodes that granted, voting or not
	skipped            bool  // the fence was not written back (see outcome)
	undo               []int // nodes that granted (a chosen token: newly)
	failed             []int // nodes that answered with an error: their SET may have landed
	errs               []error
}

func (t *acqTally) add(r reply[acqReply]) bool {
	c := t.a.c
	switch {
	case r.err != nil:
		t.bad++
		t.errs = append(t.errs, r.err)
		if !r.silent && !t.a.chosen {
			t.failed = append(t.failed, r.node)
		}
		return t.decided()
	case !r.val.ok:
		t.no++
		t.pttls = append(t.pttls, r.val.pttl)
	default:
		t.minFence, t.maxFence = min(t.minFence, r.val.fence), max(t.maxFence, r.val.fence)
		t.granted = append(t.granted, r.node)
		t.anyExisting = t.anyExisting || r.val.existing
		if !t.a.chosen || !r.val.existing {
			t.undo = append(t.undo, r.node) // a chosen token undoes only what it newly set
		}
		switch {
		case c.nodes[r.node].quarantined(time.Now()):
			// its SET landed but it does not vote: undo it on failure
			t.bad++
			t.errs = append(t.errs, c.nodes[r.node].fail(errQuarantined))
		case r.val.existing:
			t.yes++
			t.existing = append(t.existing, r.val)
			next := r.val.counter + 1
			if t.a.kind.sharedFence() {
				next = r.val.counter // a reader gets the last writer's fence
			}
			t.newFence = max(t.newFence, next)
		default:
			t.yes++
			t.newFence = max(t.newFence, r.val.fence)
		}
	}
	t.answered = append(t.answered, r.node)
	if !t.decided() || t.yes < t.q || len(t.existing) == 0 {
		return t.decided()
	}
	// A re-acquire waits until whether it keeps its fence is certain.
	_, n := committedFence(t.existing)
	pending := t.n - t.yes - t.no - t.bad
	return n >= t.q || n+pending < t.q
}

// run is one round (see kind.round).
func (a *attempt) run(ctx context.Context) (Lock, error) { return a.kind.round(ctx, a) }

// args are acquire.lua's ARGV.
func (a *attempt) args() []any {
	return []any{a.token, a.ttl.Milliseconds(), a.owner, a.markedInterest(), a.wwait(), a.c.fenceIdle(), fenceFloor(), a.c.mark}
}

// markedInterest is interest, noted in a.marked.
func (a *attempt) markedInterest() int {
	i := a.interest()
	a.marked = i == 2
	return i
}

// outcome makes the lock from an acquire round's answers, or undoes them.
func (a *attempt) outcome(ctx context.Context, start time.Time, t *acqTally) (Lock, error) {
	if lock, ok := a.granted(ctx, start, t); ok {
		a.c.obs.Decided(ctx, Decision{Outcome: OutcomeAcquired, Round: true})
		return lock, nil
	}
	return Lock{}, a.failed(ctx, []*acqTally{t})
}

// granted makes the lock from an acquire round's answers, writing its fence
// back if needed; false when they do not make it.
func (a *attempt) granted(ctx context.Context, start time.Time, t *acqTally) (Lock, bool) {
	c := a.c
	if t.yes < c.quorum {
		return Lock{}, false
	}
	fence, kept := t.newFence, keptFence(t.existing, c.quorum)
	if kept > 0 {
		fence = kept // idempotent re-acquire keeps its fencing token
	}
	// When every node that answered newly granted the lock with the same
	// fence, the counters of a quorum hold it already: nothing to write
	// back before answering (finish may write it back later). A chosen
	// token's fence is always written back, so that a re-acquire can tell
	// its records from those of a failed attempt (see keptFence).
	held := t.yes
	t.skipped = t.minFence == t.maxFence && !t.anyExisting && !a.chosen
	if !t.skipped {
		held, fence = c.commit(ctx, t.tg, a.token, t.answered, fence, a.kind.sharedFence())
	}
	validity := c.validity(a.ttl, start)
	if held < c.quorum || validity <= 0 {
		return Lock{}, false
	}
	return Lock{
		Namespace: a.ns, Resource: a.resource, Token: a.token, Fence: fence, Mode: a.kind.mode(), Owner: a.owner,
		TTL: a.ttl, Validity: validity, Start: start, Until: start.Add(validity),
		Nodes: len(c.nodes), Quorum: c.quorum, Locked: held,
	}, true
}

// failed undoes a failed acquire round and returns its error. ts are its
// tallies: one per resource of a lock on several (see multiKind.round), which count
// the same votes.
func (a *attempt) failed(ctx context.Context, ts []*acqTally) error {
	c, t := a.c, ts[0]
	// Undo, before returning, what the nodes that granted hold, so
	// that the caller's next round finds them free. Nodes that failed (a
	// timeout, a dropped connection) may hold it too, but may well fail
	// again, and are not waited for. An undo that could run after the next
	// round of the same token would delete what that round took (its grant
	// of an existing key), so they, late grants and silent nodes of a random
	// token are undone in the background once no later round can run (see
	// cleanup): a waiting acquire's next rounds count them as grants, and
	// one that ends without the lock undoes them then (abandon).
	c.each(len(ts), func(i int) {
		if len(ts[i].undo) > 0 {
			ts[i].a.undo(context.WithoutCancel(ctx), ts[i].undo)
		}
	})
	if len(t.failed) > 0 && !a.chosen {
		c.bg.Go(func() { a.cleanup(context.WithoutCancel(ctx), t.failed) })
	}
	d := Decision{Outcome: OutcomeUnavailable, Round: true, Split: t.yes > 0 && len(t.pttls) < c.quorum}
	if t.refused() {
		d.Outcome = OutcomeHeld
	}
	c.obs.Decided(ctx, d)
	if d.Outcome == OutcomeHeld {
		return &HeldError{Remaining: freeIn(t.pttls, len(c.nodes), c.quorum)}
	}
	return unavailable(t.errs)
}
