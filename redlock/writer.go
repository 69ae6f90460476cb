package redlock

import "context"

// lockKind is what the kinds on one resource's lock keys share (a writer's
// lock and a reader's): the target, the queue, and re-acquiring, undoing
// and giving back the lock.
type lockKind struct {
	oneLock
	k lockKeys
}

func (l lockKind) target() target { return lockTarget{l.k} }

func (l lockKind) retried(ctx context.Context, a *attempt) (Lock, bool) {
	p, ok := a.reacquire(ctx, l.target())
	return p.Lock, ok
}

func (l lockKind) undo(ctx context.Context, a *attempt, idxs []int) { a.undoOn(ctx, l.target(), idxs) }

func (l lockKind) release(ctx context.Context, a *attempt, token string) error {
	return a.c.release(ctx, l.target(), token)
}

func (l lockKind) queues() []string { return []string{l.k.queue()} }

// writerKind is a writer's lock on one resource (Acquire, ModeWrite): its
// rounds run acquire.lua, a waiting writer keeps new readers out, and a
// writer's release may hand the lock to it (see Release).
type writerKind struct{ lockKind }

func (writerKind) takesHandOver() bool     { return true }
func (w writerKind) handedOver(int) target { return w.target() }

func (writerKind) mode() Mode { return ModeWrite }

func (w writerKind) round(ctx context.Context, a *attempt) (Lock, error) {
	return a.runRound(ctx, acquireRound{tg: w.target(), script: scriptAcquire, parse: parseAcquire})
}

func (w writerKind) wwaits() []string { return []string{w.k.wwait()} }
