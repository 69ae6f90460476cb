package redlock

import (
	"context"
	"time"
)

// Extend makes the lock valid for ttl from now (DefaultTTL when ttl is 0).
// While a quorum still holds the token it also puts the lock back on nodes
// where it vanished (a restarted node). May return ErrInvalid,
// ErrLockExpired or ErrHeldByOther (the lock is lost), or
// ErrQuorumUnavailable (too many nodes silent to tell).
func (c *Coordinator) Extend(ctx context.Context, namespace, resource, token string, ttl time.Duration) (Lock, error) {
	p, err := c.extend(ctx, lockTarget{c.lockKeysOf(namespace, resource)}, namespace, resource, token, ttl)
	return p.Lock, err
}

// extend is Extend of tg: a lock, or a semaphore's permit (whose name is
// resource), whose index and limit it also returns (a lock's are 0).
func (c *Coordinator) extend(ctx context.Context, tg target, namespace, resource, token string, ttl time.Duration) (Permit, error) {
	if err := c.checkName(namespace, resource, token); err != nil {
		return Permit{}, err
	}
	ttl, err := c.ttlOrDefault(ttl)
	if err != nil {
		return Permit{}, err
	}
	start := time.Now()
	var p Permit
	t := votes{n: len(c.nodes), q: c.quorum}
	var other, extended, refused int
	var absent []int
	var errs []error
	// The nodes that extended, by permit (a lock's is permit 0): a
	// semaphore's token may hold different permits on different nodes (a
	// client token's rounds on several permits), and only a quorum on one
	// permit holds it. The other permits' yes votes count as no.
	type held struct {
		yes    int
		fence  fenceChoice
		owner  string
		reader bool
	}
	byPermit := map[int]*held{}
	best := &held{}
	_, rd := runScript(ctx, c, c.idxs, tg.script(scriptExtend), tg.keys().extend(), []any{token, ttl.Milliseconds()}, tg.extends(), func(r reply[extReply]) bool {
		switch why := c.abstention(r.node, r.err); {
		case why != nil:
			t.bad++
			errs = append(errs, why)
			if r.err == nil && r.val.state == 0 {
				absent = append(absent, r.node) // quarantined: put it back, though it does not vote
			}
		case r.val.state == 1:
			extended++
			h := byPermit[r.val.permit]
			if h == nil {
				h = &held{}
				byPermit[r.val.permit] = h
			}
			h.yes++
			h.fence.add(r.val.committed, r.val.fence)
			h.owner = r.val.owner
			if h.yes > best.yes {
				best = h
				p.Index, p.Limit = r.val.permit, r.val.limit
			}
			h.reader = h.reader || r.val.reader
		case r.val.state == 0:
			refused++
			absent = append(absent, r.node)
		default:
			refused++
			other++
		}
		t.yes, t.no = best.yes, refused+extended-best.yes
		// A success waits until its fence is certain, or every node answered.
		_, certain := best.fence.value(c.quorum)
		return t.decided() && (t.yes < c.quorum || certain || t.yes+t.no+t.bad == t.n)
	})
	mode := ModeWrite
	if best.reader {
		mode = ModeRead
	}
	lock, err := func() (Lock, error) {
		if t.yes < c.quorum || c.validity(ttl, start) <= 0 {
			if t.refused() {
				return Lock{}, c.notOwner(other)
			}
			return Lock{}, unavailable(errs)
		}
		f, certain := best.fence.value(c.quorum)
		if !certain {
			// A late SET recorded another fence (see fenceChoice), and too
			// few nodes answered to tell which is the lock's: the lock is
			// extended, but its fence is not known. Never a different one.
			return Lock{}, unavailable(append(errs, errFenceUnknown))
		}
		// The quorum holds: put the lock back where it vanished, in the
		// background (it decides nothing).
		if len(absent) > 0 {
			c.bg.Go(func() { c.reassert(context.WithoutCancel(ctx), tg, token, absent, ttl, f, best.owner, mode, p) })
		}
		validity := c.validity(ttl, start)
		if validity <= 0 {
			return Lock{}, unavailable(errs)
		}
		return Lock{
			Namespace: namespace, Resource: resource, Token: token, Fence: f, Mode: mode, Owner: best.owner,
			TTL: ttl, Validity: validity, Start: start, Until: start.Add(validity),
			Nodes: len(c.nodes), Quorum: c.quorum, Locked: t.yes,
		}, nil
	}()
	rd.stragglers(func(late []reply[extReply], _ []int) {
		var absent []int
		for _, r := range late {
			if r.err == nil && r.val.state == 0 {
				absent = append(absent, r.node)
			}
		}
		if err == nil {
			c.reassert(context.Background(), tg, token, absent, ttl, lock.Fence, lock.Owner, lock.Mode, p)
		}
	})
	if err != nil {
		return Permit{}, err
	}
	return Permit{Lock: lock, Index: p.Index, Limit: p.Limit}, nil // p is the stragglers' now
}

// reassert puts token's lock back on the nodes idxs, where it vanished (a
// restarted node), while a quorum holds it; it never overwrites another
// token.
// A reader (mode) is put back as a reader; a semaphore's permit as p (its
// index and limit).
func (c *Coordinator) reassert(ctx context.Context, tg target, token string, idxs []int, ttl time.Duration, fence int64, owner string, mode Mode, p Permit) {
	if len(idxs) == 0 {
		return
	}
	rd := c.sendReassert(ctx, tg, token, idxs, ttl, fence, owner, mode, p)
	rd.decide(ctx, nil)
	rd.stragglers(nil)
}

// sendReassert is reassert sent without waiting: the caller must call
// stragglers on the round it returns, which then waits in the background.
func (c *Coordinator) sendReassert(ctx context.Context, tg target, token string, idxs []int, ttl time.Duration, fence int64, owner string, mode Mode, p Permit) *round[int64] {
	args := append([]any{token, ttl.Milliseconds(), fence, owner, string(mode), c.fenceIdle()}, tg.reassertArgs(p)...)
	return sendScript(ctx, c, idxs, tg.script(scriptReassert), tg.keys().reassert(), args, tg.int64s(), true)
}
