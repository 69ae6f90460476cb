package redlock

import (
	"context"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lock kinds. An attempt (see acquire.go) takes a lock of one kind: a
// writer's lock (writer.go), a reader's (reader.go), a writer's lock on
// several resources (multi.go) or a semaphore's permit (permit.go). The
// attempt, its waiting and its cleanup are the same for every kind; what a
// kind adds is here, one implementation per kind, so that a new kind is one
// file (and its script).
type kind interface {
	// mode is the Mode of the locks it takes.
	mode() Mode
	// round is one acquire round of a: its script, keys and arguments,
	// how a node's answer is read and counted, and what follows.
	round(ctx context.Context, a *attempt) (Lock, error)
	// retried re-acquires the lock that a's chosen token holds already, as
	// an extend does; false when it does not hold it as asked (see
	// attempt.retried).
	retried(ctx context.Context, a *attempt) (Lock, bool)
	// undo releases a's token on the nodes idxs without remembering
	// the release: the attempt failed, so no release of it can be retried.
	undo(ctx context.Context, a *attempt, idxs []int)
	// release gives back a lock of a's that its caller will never get.
	release(ctx context.Context, a *attempt, token string) error
	// queues are the lock keys of its resources: the queues a waiting
	// acquire waits in. heads is how many of a queue's waiters contend at
	// once; takesHandOver tells whether a release may hand a waiter the
	// lock (see handOver), and handedOver is the target of the lock (of
	// permit, a semaphore's; below 0, the one it asks for now) that a
	// hand-over gave it.
	queues() []string
	heads() int
	takesHandOver() bool
	handedOver(permit int) target
	// wwaits are the keys of the waiting writers it joins while it waits
	// (it keeps new readers out); none for a kind that does not.
	wwaits() []string
	// sharedFence tells that its fence is the last writer's, shared with
	// others and only recorded, never a new one (a reader's).
	sharedFence() bool
	// again tells that the last round was refused but another round may be
	// granted at once; freed tells it that the release of permit woke it.
	again() bool
	freed(permit int)
	// full tells that the last round left no permit free for another
	// waiter: refused with no permit free, nor held by the token, on any
	// node that answered, or granted the last permit free on every node
	// that granted it (a semaphore's; a lock has no other permit).
	full() bool
}

// oneLock is what the kinds share that take one lock at a time (a
// semaphore's is of its permit): one waiter contends, nothing is handed
// over (but to a writer, see writerKind), nothing can be granted again at
// once after a refusal.
type oneLock struct{}

func (oneLock) heads() int            { return 1 }
func (oneLock) takesHandOver() bool   { return false }
func (oneLock) handedOver(int) target { return nil }
func (oneLock) sharedFence() bool     { return false }
func (oneLock) again() bool           { return false }
func (oneLock) full() bool            { return true }
func (oneLock) freed(int)             {}

// target is what the rounds after an acquire work on (commit, extend,
// reassert, release): a lock's keys and scripts (lockTarget), or a
// semaphore's (permitTarget), whose scripts run the lock's on the permit
// that the token holds on each node.
type target interface {
	keys() scriptKeys
	// script is the version of the lock script s that it runs.
	script(s *redis.Script) *redis.Script
	// asked is the permit an acquire round asked for: its commit counts
	// only that permit's (a lock's: 0).
	asked() int
	// The decoders of its scripts' replies.
	int64s() func(*redis.Cmd) (int64, error)
	releases() func(*redis.Cmd) (relReply, error)
	commits() func(*redis.Cmd) (commitReply, error)
	extends() func(*redis.Cmd) (extReply, error)
	// reassertArgs are the ARGV reassert.lua's version takes after the
	// lock's, for the permit p.
	reassertArgs(p Permit) []any
}

// lockTarget is a lock's target.
type lockTarget struct{ k lockKeys }

func (tg lockTarget) keys() scriptKeys                     { return tg.k }
func (tg lockTarget) script(s *redis.Script) *redis.Script { return s }
func (tg lockTarget) asked() int                           { return 0 }
func (tg lockTarget) int64s() func(*redis.Cmd) (int64, error) {
	return (*redis.Cmd).Int64
}
func (tg lockTarget) releases() func(*redis.Cmd) (relReply, error) { return parseRelease }
func (tg lockTarget) commits() func(*redis.Cmd) (commitReply, error) {
	return parseCommit
}
func (tg lockTarget) extends() func(*redis.Cmd) (extReply, error) { return parseExtend }
func (tg lockTarget) reassertArgs(Permit) []any                   { return nil }

// acquireRound is one acquire round on one resource (or permit): what a
// kind sends, and how it counts the answers.
type acquireRound struct {
	tg     target
	script *redis.Script
	args   []any // after acquire.lua's (see attempt.args)
	parse  func(*redis.Cmd) (acqReply, error)
	// tally counts the answers with t (nil: t.add); after may change the
	// round's error (nil: kept).
	tally func(t *acqTally) func(reply[acqReply]) bool
	after func(err error) error
}

// runRound is one round r of a: the acquire script on every node, decided
// at the quorum, then the fence commit if needed. On failure it releases
// what this round may have set.
func (a *attempt) runRound(ctx context.Context, r acquireRound) (Lock, error) {
	c := a.c
	start := time.Now()
	t := &acqTally{votes: votes{n: len(c.nodes), q: c.quorum}, a: a, tg: r.tg, minFence: math.MaxInt64}
	add := t.add
	if r.tally != nil {
		add = r.tally(t)
	}
	_, rd := runScript(ctx, c, c.idxs, r.script, r.tg.keys().acquire(), append(a.args(), r.args...), r.parse, add)
	lock, err := a.outcome(ctx, start, t)
	if r.after != nil {
		err = r.after(err)
	}
	rd.stragglers(func(late []reply[acqReply], silent []int) { a.finish(err == nil, lock.Fence, t, late, silent) })
	return lock, err
}

// undoOn releases a.token from tg on the nodes idxs without remembering the release.
func (a *attempt) undoOn(ctx context.Context, tg target, idxs []int) {
	_, rd := runScript(ctx, a.c, idxs, tg.script(scriptRelease), tg.keys().release(), []any{a.token, a.c.released, 0, fingerprint(a.token)}, tg.int64s(), nil)
	rd.stragglers(nil)
}

// reacquire extends the lock on tg that a's token holds, with a's TTL, if
// it holds it in a's mode (see attempt.retried).
func (a *attempt) reacquire(ctx context.Context, tg target) (Permit, bool) {
	p, err := a.c.extend(ctx, tg, a.ns, a.resource, a.token, a.ttl)
	return p, err == nil && p.Mode == a.kind.mode()
}
