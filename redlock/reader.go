package redlock

import "context"

// readerKind is a reader's lock on one resource (Acquire, ModeRead; see
// read_acquire.lua): readers share the lock with each other and the last
// writer's fence, and never keep anyone out while they wait.
type readerKind struct{ lockKind }

// scriptRead is a reader's acquire round.
var scriptRead = script("read_acquire.lua")

func (readerKind) mode() Mode { return ModeRead }

func (r readerKind) round(ctx context.Context, a *attempt) (Lock, error) {
	return a.runRound(ctx, acquireRound{tg: r.target(), script: scriptRead, parse: parseAcquire})
}

func (readerKind) wwaits() []string { return nil }

func (readerKind) sharedFence() bool { return true }
