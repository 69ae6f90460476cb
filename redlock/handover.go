package redlock

import (
	"context"
	"math"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hand-overs. A release through a coordinator where an acquire waits for
// the lock (a writer's, or a semaphore's permit) gives it to the waiter in
// the release's own round: each node releases the lock and grants it to the
// waiter's token in one script (lock_handover.lua, permit_handover.lua), so
// no announcement, wake-up and round come between a release and the next
// holder, and the lock is never free while the waiter waits. Only a head of
// the queue that waits idle, between its rounds, is handed one (see
// waitHub.claim): waiters are served first come, first served.

var scriptLockHandover = script("lock_handover.lua", "release.lua")

// handOver is lock_handover.lua's KEYS.
func (k lockKeys) handOver() []string { return []string{k.Lock, k.Readers, k.RMeta, k.Fence, k.WWait} }

// handOver releases the lock that token holds with the script s (KEYS keys)
// and gives it, on every node where token held it, to the waiting acquire
// of w. That is a release followed at once by an acquire on each node, so
// the waiter's lock is decided as an acquire round's (acqTally, outcome:
// validity from the round's start, fence written back when the nodes'
// differ, grants undone when short of a quorum), and the releaser's answer
// as a release's. The waiter gets its outcome before the releaser: a
// failed hand-over (a node that released without granting, say, as
// lock_handover.lua does when waiters of another gateway wait) sends it
// back to its rounds.
func (c *Coordinator) handOver(ctx context.Context, s *redis.Script, keys []string, token string, w *waiter) error {
	a := w.a
	start := time.Now()
	rel, other := votes{n: len(c.nodes), q: c.quorum}, 0
	t := &acqTally{votes: votes{n: len(c.nodes), q: c.quorum}, a: a, tg: a.kind.handedOver(-1), minFence: math.MaxInt64}
	var errs []error
	args := []any{token, c.released, c.opts.MaxTTL.Milliseconds(), fingerprint(token), a.token, w.own,
		a.ttl.Milliseconds(), a.owner, c.fenceIdle(), fenceFloor(), a.markedInterest(), a.wwait(), c.mark}
	// The waiter gets one lock: a semaphore's waiter the permit of the first
	// node that handed one over (the releasing token may hold different
	// permits on different nodes, left by a client token's rounds on
	// several). Grants of another permit count as refusals, and are undone.
	acqDecided, permit := false, -1
	var stray []int
	counted, rd := runScript(ctx, c, c.idxs, s, keys, args, parseHandOver, func(r reply[handOverReply]) bool {
		switch why := c.abstention(r.node, r.err); {
		case why != nil:
			rel.bad++
			errs = append(errs, why)
		case r.val.released == 1 || r.val.released == 2:
			rel.yes++
		case r.val.released == -1:
			rel.no++
			other++
		default:
			rel.no++
		}
		if r.err == nil && r.val.acq.ok {
			if permit < 0 {
				permit = r.val.permit
				t.tg = a.kind.handedOver(permit)
			}
			if r.val.permit != permit {
				stray = append(stray, r.node)
				r.val.acq = acqReply{pttl: -1, permit: r.val.permit}
			}
		}
		acqDecided = t.add(reply[acqReply]{node: r.node, val: r.val.acq, err: r.err, silent: r.silent})
		return rel.decided() && acqDecided
	})
	lock, err := a.outcome(ctx, start, t)
	// The nodes where the releasing token holds no permit, of the answers
	// in: counted, or in but not counted (decided without). Only a
	// semaphore's hand-over that succeeded looks (a lock's reply names no
	// permit), so that a lock's pays no parsing for it.
	var gaps []int
	if err == nil && a.kind.heads() > 1 { // a semaphore's: one head per permit
		for _, r := range append(counted, rd.peek()...) {
			if r.err == nil && r.val.permit < 0 {
				gaps = append(gaps, r.node)
			}
		}
	}
	var fill *round[int64]
	if len(gaps) > 0 {
		// Put the permit handed over where the releasing token held none (a
		// permit free there since its holder's release landed after a try
		// took it elsewhere), if it is free there: else each later release of
		// it leaves it free on those nodes, where every try sees a permit
		// free that no round can take. Sent before the waiter has its
		// answer, so that its release comes after on each node's ordered
		// stream (see batch.go).
		p := Permit{Index: permit, Limit: a.kind.heads()}
		fill = c.sendReassert(context.WithoutCancel(ctx), t.tg, a.token, gaps, lock.TTL, lock.Fence, lock.Owner, ModeWrite, p)
	}
	w.offer <- handoff{lock: lock, err: err}
	// Let the waiter, readied on this P, run first: the new holder's answer
	// then usually leaves before the releaser's, and the lock is not idle
	// between them for the clients (a client that released is done with it).
	runtime.Gosched()
	if fill != nil {
		fill.stragglers(nil)
	}
	if len(stray) > 0 {
		a.undo(context.WithoutCancel(ctx), stray)
	}
	rd.stragglers(func(late []reply[handOverReply], silent []int) {
		acq := make([]reply[acqReply], 0, len(late))
		for _, r := range late {
			acq = append(acq, reply[acqReply]{node: r.node, val: r.val.acq, err: r.err})
		}
		a.finish(err == nil, lock.Fence, t, acq, silent)
	})
	switch {
	case rel.yes >= c.quorum:
		return nil
	case rel.refused():
		return c.notOwner(other)
	}
	return unavailable(errs)
}
