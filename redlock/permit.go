package redlock

import (
	"context"
	"math/rand/v2"

	"github.com/redis/go-redis/v9"
)

// The scripts of a semaphore's permits: each runs a lock script on the
// permit it picks from the index of the permits on the node (permits.lua,
// which each includes); inspect and the hand-over are the semaphore's own.
var (
	permitScripts = map[*redis.Script]*redis.Script{
		scriptAcquire:  script("permit_acquire.lua", "acquire.lua"),
		scriptCommit:   script("permit_find.lua", "commit.lua"),
		scriptRelease:  script("permit_find.lua", "release.lua"),
		scriptExtend:   script("permit_find.lua", "extend.lua"),
		scriptReassert: script("permit_reassert.lua", "reassert.lua"),
	}
	scriptPermitInspect  = script("permit_inspect.lua")
	scriptPermitHandover = script("permit_handover.lua")
)

// permitTarget is a semaphore's target: its scripts (permitScripts) run the
// lock's on the permit that the token holds on each node, found in the
// node's index of the permits (permits.lua).
type permitTarget struct {
	k      semaphoreKeys
	permit int // an acquire round's: the permit it asked for (commit counts only it)
}

func (tg permitTarget) keys() scriptKeys                     { return tg.k }
func (tg permitTarget) script(s *redis.Script) *redis.Script { return permitScripts[s] }
func (tg permitTarget) asked() int                           { return tg.permit }

// The decoders of the permit versions' replies: the lock script's reply,
// with the permit (and, of extend, the limit) the token holds on the node.
func (tg permitTarget) int64s() func(*redis.Cmd) (int64, error) {
	return onPermit((*redis.Cmd).Int64, func(*int64, int, any) {})
}

func (tg permitTarget) releases() func(*redis.Cmd) (relReply, error) {
	return onPermit(parseRelease, func(r *relReply, permit int, _ any) { r.permit = permit })
}

func (tg permitTarget) commits() func(*redis.Cmd) (commitReply, error) {
	return onPermit(parseCommit, func(r *commitReply, permit int, _ any) { r.permit = permit })
}

func (tg permitTarget) extends() func(*redis.Cmd) (extReply, error) {
	return onPermit(parseExtend, func(r *extReply, permit int, limit any) { r.permit, r.limit = permit, int(toInt(limit)) })
}

// reassertArgs are permit_reassert.lua's ARGV after reassert.lua's.
func (tg permitTarget) reassertArgs(p Permit) []any { return []any{p.Index, p.Limit} }

// permitKind is a semaphore's permit (AcquirePermit): every round
// asks the nodes for one permit, prefer, so that holders of a permit conflict
// pairwise as a lock's do. The first round asks for a random permit (any is
// free on an idle semaphore, and clients arriving together spread over the
// permits); a node that refuses it reports the first permit free there after
// it (or, when none is, the one that expires first), and the next round asks
// for the permit reported free by most nodes, or the one whose release woke
// the waiter.
type permitKind struct {
	k      semaphoreKeys
	limit  int
	prefer int

	// grantable: the last round was refused, but another permit may be
	// granted at once (free on a quorum, or held by the token already).
	grantable bool

	// Of the last round: the limit a quorum of nodes hold the permits with
	// (mismatch), and the permits they reported free or holding the token.
	mismatch, mismatches int
	free                 map[int]int // permit → nodes
	held                 map[int]int // permit → nodes where the token holds it already
	soonest              map[int]int // permit → nodes where it expires first of all, when none is free
	// Of the last round: it was granted; how many nodes granted it, and how
	// many of them have every permit held now.
	won            bool
	grants, filled int
}

// parser parses the replies of a round that asked for permit p. A node where
// the token holds another permit already, or where the permits are held with
// another limit, refuses p: its acqReply says which (permit, mismatch).
func (s *permitKind) parser(p int) func(*redis.Cmd) (acqReply, error) {
	return func(cmd *redis.Cmd) (acqReply, error) {
		r, err := parsePermitAcquire(cmd)
		if err != nil || r.permit == p || !r.ok {
			return r, err
		}
		return acqReply{pttl: -1, permit: r.permit, free: r.free}, nil // the token holds another permit here
	}
}

// tally is t.add, noting what the answers say about the permits first.
func (s *permitKind) tally(t *acqTally) func(reply[acqReply]) bool {
	s.mismatches, s.mismatch = 0, 0
	s.free, s.held, s.soonest = map[int]int{}, map[int]int{}, map[int]int{}
	s.grants, s.filled = 0, 0
	return func(r reply[acqReply]) bool {
		if r.err == nil {
			switch v := r.val; {
			case v.ok:
				s.grants++
				if v.full {
					s.filled++
				}
			case v.mismatch > 0:
				s.mismatches++
				s.mismatch = v.mismatch
			case !v.ok && v.pttl < 0:
				s.held[v.permit]++
			case !v.ok && len(v.free) == 0:
				s.soonest[v.permit]++
			}
			for _, f := range r.val.free {
				s.free[f]++
			}
		}
		return t.add(r)
	}
}

// after turns a failed round's error into a *LimitError when a quorum holds
// the permits with another limit, and picks the next round's permit.
func (s *permitKind) after(err error, quorum int) error {
	if s.won = err == nil; s.won {
		return nil
	}
	if s.mismatches >= quorum {
		return &LimitError{Limit: s.mismatch}
	}
	for _, m := range []map[int]int{s.held, s.free, s.soonest} {
		if len(m) > 0 {
			s.prefer = most(m)
			break
		}
	}
	s.grantable = len(s.held) > 0 || s.free[s.prefer] >= quorum
	return err
}

// freed makes a permit whose release woke the waiter the next one to ask for.
func (s *permitKind) freed(permit int) {
	if permit >= 0 && permit < s.limit {
		s.prefer = permit
	}
}

// most is the key of m with the greatest count, a random one among ties.
func most(m map[int]int) int {
	best, n, ties := -1, 0, 0
	for k, v := range m {
		switch {
		case v > n:
			best, n, ties = k, v, 1
		case v == n:
			if ties++; rand.N(ties) == 0 {
				best = k
			}
		}
	}
	return best
}

func (s *permitKind) target() permitTarget { return permitTarget{k: s.k} }

func (*permitKind) mode() Mode { return ModeWrite }

// round asks every node for the permit s.prefer (see permit_acquire.lua)
// and picks the next round's permit from their answers.
func (s *permitKind) round(ctx context.Context, a *attempt) (Lock, error) {
	return a.runRound(ctx, acquireRound{
		tg:     permitTarget{k: s.k, permit: s.prefer},
		script: permitScripts[scriptAcquire],
		args:   []any{s.prefer, s.limit},
		parse:  s.parser(s.prefer),
		tally:  s.tally,
		after:  func(err error) error { return s.after(err, a.c.quorum) },
	})
}

// retried re-acquires the permit the token holds, if it holds it with the
// limit asked for; the permit is then the one asked for.
func (s *permitKind) retried(ctx context.Context, a *attempt) (Lock, bool) {
	p, ok := a.reacquire(ctx, s.target())
	if !ok || p.Limit != s.limit {
		return Lock{}, false
	}
	s.prefer = p.Index
	return p.Lock, true
}

func (s *permitKind) undo(ctx context.Context, a *attempt, idxs []int) {
	a.undoOn(ctx, s.target(), idxs)
}

func (s *permitKind) release(ctx context.Context, a *attempt, token string) error {
	return a.c.release(ctx, s.target(), token)
}

// queues: a semaphore has one queue, whose first limit waiters contend (one
// per permit), and a release may hand a permit to one of them (handOver),
// which it then prefers (handedOver; a permit below 0: none yet).
func (s *permitKind) queues() []string  { return []string{s.k.queue()} }
func (s *permitKind) heads() int        { return s.limit }
func (*permitKind) takesHandOver() bool { return true }
func (s *permitKind) handedOver(permit int) target {
	if permit >= 0 {
		s.prefer = permit
	}
	return s.target()
}
func (*permitKind) wwaits() []string  { return nil }
func (*permitKind) sharedFence() bool { return false }
func (s *permitKind) again() bool     { return s.grantable }
func (s *permitKind) full() bool {
	if s.won { // every node that granted it has no permit left
		return s.filled == s.grants
	}
	return len(s.free) == 0 && len(s.held) == 0
}
