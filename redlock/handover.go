package redlock

import (
	"context"
	"math"
	"runtime"
	"time"
)

// handOver releases the permit that token holds and gives it, on every node
// where token held it, to the waiting acquire of w in the same script
// (permit_handover.lua): the permit is never free while w waits, so no
// announcement, wake-up and round come between a release and the next
// holder. That is a release followed at once by an acquire on each node, so
// the waiter's lock is decided as an acquire round's (acqTally, outcome:
// validity from the round's start, fence written back when the nodes'
// differ, grants undone when short of a quorum), and the releaser's answer
// as a release's. The waiter gets its outcome before the releaser: a
// failed hand-over sends it back to its rounds.
func (c *Coordinator) handOver(ctx context.Context, keys semaphoreKeys, token string, w *waiter) error {
	a := w.a
	pk := a.kind.(*permitKind) // only a permit's waiters take hand-overs (see kind.takesHandOver)
	c.stats.attempts.Add(1)
	start := time.Now()
	rel := votes{n: len(c.nodes), q: c.quorum}
	t := &acqTally{votes: votes{n: len(c.nodes), q: c.quorum}, a: a, tg: pk.target(), minFence: math.MaxInt64}
	var errs []error
	args := []any{token, c.released, c.opts.MaxTTL.Milliseconds(), a.token, a.ttl.Milliseconds(), a.owner, c.fenceIdle(), fenceFloor()}
	// The waiter gets one permit: the one of the first node that handed one
	// over (the releasing token may hold different permits on different
	// nodes, left by a client token's rounds on several). Grants of another
	// permit count as refusals, and are undone.
	acqDecided, permit := false, -1
	var stray []int
	_, rd := runScript(ctx, c, c.idxs, scriptPermitHandover, keys.handOver(token), args, parseHandOver, func(r reply[handOverReply]) bool {
		switch {
		case r.err != nil:
			rel.bad++
			errs = append(errs, r.err)
		case c.nodes[r.node].quarantined(time.Now()):
			rel.bad++
			errs = append(errs, c.nodes[r.node].fail(errQuarantined))
		case r.val.released == 1 || r.val.released == 2:
			rel.yes++
		default:
			rel.no++
		}
		if r.err == nil && r.val.acq.ok {
			if permit < 0 {
				permit = r.val.permit
				pk.prefer, t.tg = permit, permitTarget{k: pk.k, permit: permit}
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
	w.offer <- handoff{lock: lock, err: err}
	// Let the waiter, readied on this P, run first: the new holder's answer
	// then usually leaves before the releaser's, and the permit is not idle
	// between them for the clients (a client that released is done with it).
	runtime.Gosched()
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
		return ErrLockExpired
	}
	return unavailable(errs)
}
