package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"
)

// fenceIdle is how long a fence counter lives after its last change, in ms
// (see fence.lua).
func (c *Coordinator) fenceIdle() int64 { return c.opts.FenceIdleTTL.Milliseconds() }

// fenceFloor is where a fence counter made anew starts: this clock in
// microseconds (see fence.lua).
func fenceFloor() int64 { return time.Now().UnixMicro() }

// keptFence is the fence an idempotent re-acquire keeps, or 0 when it is a
// new acquisition that needs a new, greater fence. It keeps the fence F only
// when a quorum of voting nodes hold the token with F written back beside it
// (commit.lua or reassert.lua): the token has then held a quorum without a
// break since F was handed out, so no other acquire can have succeeded and
// taken a greater fence meanwhile. A token that holds the lock on fewer
// nodes (it lost the lock, and others may have held it since), or whose
// records were made by an attempt that failed (a SET that landed late on a
// paused node records only the node's tentative fence), gets a new fence.
func keptFence(existing []acqReply, quorum int) int64 {
	if f, n := committedFence(existing); n >= quorum {
		return f
	}
	return 0
}

// committedFence returns the greatest fence written back beside the token's
// lock on the nodes of existing, and on how many of them.
func committedFence(existing []acqReply) (f int64, n int) {
	for _, r := range existing {
		switch {
		case !r.committed:
		case r.fence > f:
			f, n = r.fence, 1
		case r.fence == f:
			n++
		}
	}
	return f, n
}

// maxClaims bounds the fences one commit tries (see commit).
const maxClaims = 4

// commit writes fence back to the nodes idxs, beside token's lock, so that
// any later quorum reads a counter at least this high, as each node's claim
// of it (see commit.lua): a writer's fence counts only on nodes that gave it
// to no other token, so no two holders of a semaphore's permits get one
// fence from a quorum. When concurrent acquires of other permits took the
// value on too many nodes, it claims a greater one, at most maxClaims times.
// A reader's (shared) is the last writer's: it is only recorded.
// Decided at the quorum, it returns on how many voting nodes the fence was
// recorded and the token holds the lock, and the fence.
func (c *Coordinator) commit(ctx context.Context, tg target, token string, idxs []int, fence int64, shared bool) (held int, _ int64) {
	for try := 1; ; try++ {
		held, top, refused := c.claim(ctx, tg, token, idxs, fence, shared)
		if held >= c.quorum || refused == 0 || try == maxClaims {
			return held, fence
		}
		// Above every counter seen, spread so that two acquires that
		// collided are unlikely to pick the same value again.
		fence = max(top, fence) + 1 + rand.Int64N(int64(len(c.nodes)))
	}
}

// claim is one round of commit: on how many voting nodes the fence was
// recorded, the greatest counter seen, and how many holding nodes refused.
func (c *Coordinator) claim(ctx context.Context, tg target, token string, idxs []int, fence int64, shared bool) (held int, top int64, refused int) {
	t := &votes{n: len(idxs), q: c.quorum}
	args := []any{token, fence, c.fenceIdle(), 1}
	if shared {
		args[3] = 0
	}
	_, rd := runScript(ctx, c, idxs, tg.script(scriptCommit), tg.keys().commit(), args, tg.commits(), func(r reply[commitReply]) bool {
		if r.err == nil {
			top = max(top, r.val.counter)
		}
		switch {
		case r.err != nil || c.nodes[r.node].quarantined(time.Now()):
			t.bad++
		case r.val.state == 1 && r.val.permit == tg.asked(): // a semaphore's: the same permit
			t.yes++
		case r.val.state == -1:
			refused++
			t.no++
		default:
			t.no++
		}
		return t.decided()
	})
	rd.stragglers(nil)
	return t.yes, top, refused
}

// fenceChoice picks the fence recorded beside a lock from several nodes'
// records: the chosen fence (written back by commit.lua) wherever a node has
// it, else the nodes' tentative fences. A node that missed the write-back
// keeps its own tentative fence and must not be believed over the chosen one.
//
// The write-back is skipped when every node that answered the acquire round
// before it was decided granted with the same fence, F; those nodes, a
// quorum, record F. A node that granted later may record another tentative
// fence (it is written back when it answers within the node timeout, but a
// paused node may run the SET when it resumes). So a tentative fence is
// certain when it is the only one seen, or when a quorum agree on it (the
// late nodes are a minority); otherwise Extend waits for more answers and,
// if none makes it certain, fails as unavailable (the lock was extended; a
// retry tells), never answering another fence than the acquire's. The
// acquire writes the fence back in the background whenever a node may run
// its SET late (see finish), and a written-back fence wins, so this takes a
// late SET and an extend within about the node timeout of the acquire.
type fenceChoice struct {
	committed int64
	tentative []int64
}

func (f *fenceChoice) add(committed bool, v int64) {
	if committed {
		f.committed = max(f.committed, v)
	} else {
		f.tentative = append(f.tentative, v)
	}
}

// errFenceUnknown: an extend could not tell the lock's fence (see fenceChoice).
var errFenceUnknown = errors.New("the nodes that answered record different fencing tokens and too few answered to tell the lock's: retry")

// value returns the fence, and whether it is certain given a quorum q.
func (f *fenceChoice) value(q int) (int64, bool) {
	if f.committed > 0 {
		return f.committed, true
	}
	vs := slices.Clone(f.tentative)
	slices.Sort(vs)
	for i, j := 0, 0; i < len(vs); i = j {
		for j = i; j < len(vs) && vs[j] == vs[i]; j++ {
		}
		if j-i >= q {
			return vs[i], true
		}
	}
	if len(vs) == 0 {
		return 0, true
	}
	return vs[len(vs)-1], vs[0] == vs[len(vs)-1]
}
