package redlock

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// undo releases a.token on the nodes idxs without remembering the release:
// the attempt failed, so no release of it can be retried.
func (a *attempt) undo(ctx context.Context, idxs []int) {
	a.kind.undo(ctx, a, idxs)
}

// abandon undoes, in the background, what the rounds of a waiting acquire
// that ends without the lock may have left (late grants of its random
// token: see outcome and cleanup). A chosen token may be retried by its
// caller, so its keys are left to expire. A waiting writer that gives up
// before its wait ran out (its caller gone, a shutdown) also leaves the
// wwait sets at once (see acquire.lua): it no longer keeps new readers out.
func (a *attempt) abandon(ctx context.Context) {
	a.left.mu.Lock()
	a.left.state = ended
	dirty := slices.Compact(slices.Sorted(slices.Values(a.left.nodes)))
	a.left.mu.Unlock()
	if len(dirty) > 0 && !a.chosen {
		a.c.bg.Go(func() { a.undo(context.WithoutCancel(ctx), dirty) })
	}
	if a.wwait() > 1 {
		a.c.bg.Go(func() { a.leaveWwait(context.WithoutCancel(ctx)) })
	}
}

// leaveWwait removes a.token from the wwait set of each of its resources on
// every node, bounded by the node timeout.
func (a *attempt) leaveWwait(ctx context.Context) {
	keys := a.kind.wwaits()
	ctx, cancel := context.WithTimeout(ctx, a.c.opts.NodeTimeout)
	defer cancel()
	a.c.each(len(a.c.nodes), func(i int) {
		_, _ = a.c.nodes[i].client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.ZRem(ctx, k, a.token)
			}
			return nil
		})
	})
}

// finish deals with the answers of an acquire round that came after its
// outcome, and with the nodes still silent at the end of the node timeout.
// After a success, a late grant that recorded another fence gets the fence
// written back. If the write-back was skipped and a node may yet run its SET
// and record a fence of its own (it failed, is silent, or answered late with
// another fence), the fence is written back to every node that granted:
// extend and inspect believe it over any tentative fence (see fenceChoice).
// After a failed last round of a random token (see outcome), whatever may
// have landed is undone: late grants and errors, and silent nodes, whose SET
// may still run when a paused node resumes (then the undo may run before
// it, and the key lives one TTL: see docs/safety.md). A late grant of a
// lock that succeeded is harmless: it holds the same token, and stale keys
// alone never make a quorum.
func (a *attempt) finish(ok bool, fence int64, t *acqTally, late []reply[acqReply], silent []int) {
	undo := a.writeBack(ok, fence, t, late, silent)
	if !ok && !a.chosen {
		a.cleanup(context.Background(), append(undo, silent...))
	}
	if !ok {
		a.rejoined()
	}
}

// rejoined leaves the wwait sets again if the attempt was abandoned while a
// round was out: the round's refusals, arriving after abandon's removal,
// put the token back and would keep new readers out for the rest of the
// wait.
func (a *attempt) rejoined() {
	a.left.mu.Lock()
	over := a.left.state == ended
	a.left.mu.Unlock()
	if over && a.wwait() > 1 {
		a.leaveWwait(context.Background())
	}
}

// writeBack is finish's write-back of the fence after a success; it returns
// the nodes that answered late with a grant or an error.
func (a *attempt) writeBack(ok bool, fence int64, t *acqTally, late []reply[acqReply], silent []int) (undo []int) {
	var grants []int
	odd := t.bad > 0 || len(silent) > 0
	for _, r := range late {
		odd = odd || r.err != nil
		switch {
		case r.err == nil && r.val.ok:
			if r.val.fence != fence {
				grants = append(grants, r.node)
			}
			if t.skipped {
				t.granted = append(t.granted, r.node)
			}
			undo = append(undo, r.node)
		case r.err != nil:
			undo = append(undo, r.node)
		}
	}
	if ok {
		if t.skipped && (odd || len(grants) > 0) {
			grants = t.granted
		}
		if len(grants) > 0 {
			// One claim, never a greater fence: the lock's is decided.
			a.c.claim(context.Background(), t.tg, a.token, grants, fence, a.kind.sharedFence())
		}
	}
	return undo
}

// cleanupState is when an attempt undoes what its failed rounds of a random
// token may have left on the nodes (where a round failed, was silent, or
// granted late): only once no later round can run, since an undo that runs
// after the next round of the same token would delete what that round took.
type cleanupState int

const (
	roundsLeft cleanupState = iota // later rounds may run: keep the nodes, to undo when it ends
	lastRound                      // no round follows the one under way: undo at once
	ended                          // it ended without the lock (abandon): undo at once
)

// leftovers are an attempt's cleanup state and the nodes kept to undo.
type leftovers struct {
	mu    sync.Mutex
	state cleanupState
	nodes []int // kept while roundsLeft; abandon undoes them
}

// cleanup undoes a random token on the nodes idxs, where a failed round may
// have left it, once no later round can run: at once after a last round or
// once the attempt ended, else when it ends (abandon).
func (a *attempt) cleanup(ctx context.Context, idxs []int) {
	a.left.mu.Lock()
	now := a.left.state != roundsLeft
	if !now {
		a.left.nodes = append(a.left.nodes, idxs...)
	}
	a.left.mu.Unlock()
	if now && len(idxs) > 0 {
		a.undo(ctx, idxs)
	}
}
