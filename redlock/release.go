package redlock

import (
	"context"
	"time"
)

// Release deletes the lock on every node where token holds it. It succeeds
// iff the token held the lock on a quorum. It is idempotent: each node
// remembers the lock's last 8 releases in its record (for max TTL after
// the last one, and while the lock is held again: see rec_tombstone in
// prelude.lua), so a retried release succeeds again, even after another
// token took the lock. May return
// ErrInvalid, ErrLockExpired or ErrHeldByOther (the token cannot have held a
// quorum), or ErrQuorumUnavailable (too many nodes silent to tell).
func (c *Coordinator) Release(ctx context.Context, namespace, resource, token string) error {
	if err := c.checkName(namespace, resource, token); err != nil {
		return err
	}
	keys := c.lockKeysOf(namespace, resource)
	if w := c.hub.claim(keys.queue(), fingerprint(token)); w != nil {
		return c.handOver(ctx, scriptLockHandover, keys.handOver(), token, w)
	}
	return c.release(ctx, lockTarget{keys}, token)
}

// release is Release of tg, whose names were checked.
func (c *Coordinator) release(ctx context.Context, tg target, token string) error {
	keep := c.opts.MaxTTL.Milliseconds()
	t := votes{n: len(c.nodes), q: c.quorum}
	var other, refused, deleted, retried int
	var errs []error
	// Deleted by permit (a lock's is permit 0): as in extend, a token holds
	// the lock only where a quorum holds one permit; a release remembered (a
	// retry) joins whichever permit it was.
	byPermit := map[int]int{}
	best := 0
	_, rd := runScript(ctx, c, c.idxs, tg.script(scriptRelease), tg.keys().release(), []any{token, c.released, keep, fingerprint(token)}, tg.releases(), func(r reply[relReply]) bool {
		switch {
		case r.err != nil:
			t.bad++
			errs = append(errs, r.err)
		case r.val.v == 1:
			deleted++
			byPermit[r.val.permit]++
			best = max(best, byPermit[r.val.permit])
		case r.val.v == 2:
			// Released by this token within max TTL (a retry of a release
			// whose answer was lost).
			retried++
		case c.nodes[r.node].quarantined(time.Now()):
			// It may have lost the lock in its restart: its "no" proves nothing.
			t.bad++
			errs = append(errs, c.nodes[r.node].fail(errQuarantined))
		case r.val.v == -1:
			refused++
			other++
		default:
			refused++
		}
		t.yes, t.no = best+retried, refused+deleted-best
		return t.decided()
	})
	rd.stragglers(nil)
	switch {
	case t.yes >= c.quorum:
		return nil
	case t.refused():
		return c.notOwner(other)
	}
	return unavailable(errs)
}
