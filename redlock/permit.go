package redlock

import (
	"math/rand/v2"

	"github.com/redis/go-redis/v9"
)

// target is what a round works on: a lock, or a semaphore, whose scripts
// (permitScripts) run the lock's on the permit that the token holds on each
// node, found in the node's index of the permits (permits.lua).
type target struct {
	keys   scriptKeys // a lock's lockKeys, or a semaphore's semaphoreKeys
	sem    bool
	permit int // a semaphore's acquire round's: the permit it asked for (commit counts only it)
}

func (a *attempt) target() target { return target{keys: a.keys, sem: a.sem != nil} }

// script is s, or its version for a semaphore's permits.
func (tg target) script(s *redis.Script) *redis.Script {
	if tg.sem {
		return permitScripts[s]
	}
	return s
}

// int64s parses the integer reply of a lock script, or of its permit version.
func (tg target) int64s() func(*redis.Cmd) (int64, error) {
	if !tg.sem {
		return (*redis.Cmd).Int64
	}
	return func(cmd *redis.Cmd) (int64, error) {
		_, body, _, err := permitReply(cmd)
		if err != nil {
			return 0, err
		}
		return body.Int64()
	}
}

// releases parses release.lua's reply, or its permit version's.
func (tg target) releases() func(*redis.Cmd) (relReply, error) {
	if !tg.sem {
		return func(cmd *redis.Cmd) (relReply, error) {
			v, err := cmd.Int64()
			return relReply{v: v}, err
		}
	}
	return func(cmd *redis.Cmd) (relReply, error) {
		permit, body, _, err := permitReply(cmd)
		if err != nil {
			return relReply{}, err
		}
		v, err := body.Int64()
		return relReply{permit: permit, v: v}, err
	}
}

// commits parses commit.lua's reply, or its permit version's.
func (tg target) commits() func(*redis.Cmd) (commitReply, error) {
	return func(cmd *redis.Cmd) (commitReply, error) {
		permit := 0
		if tg.sem {
			p, body, _, err := permitReply(cmd)
			if err != nil {
				return commitReply{}, err
			}
			permit, cmd = p, body
		}
		v, err := cmd.Slice()
		if err != nil {
			return commitReply{}, err
		}
		r, err := commitReplyOf(v)
		r.permit = permit
		return r, err
	}
}

// extends parses extend.lua's reply, or its permit version's.
func (tg target) extends() func(*redis.Cmd) (extReply, error) {
	if !tg.sem {
		return parseExtend
	}
	return func(cmd *redis.Cmd) (extReply, error) {
		permit, body, limit, err := permitReply(cmd)
		if err != nil {
			return extReply{}, err
		}
		r, err := parseExtend(body)
		r.permit, r.limit = permit, int(toInt(limit))
		return r, err
	}
}

// semAttempt is what an attempt on a semaphore adds to a lock's: every round
// asks the nodes for one permit, prefer, so that holders of a permit conflict
// pairwise as a lock's do. The first round asks for a random permit (any is
// free on an idle semaphore, and clients arriving together spread over the
// permits); a node that refuses it reports the first permit free there after
// it (or, when none is, the one that expires first), and the next round asks
// for the permit reported free by most nodes, or the one whose release woke
// the waiter.
type semAttempt struct {
	limit  int
	prefer int

	// again: the last round was refused, but another permit may be granted
	// at once (free on a quorum, or held by the token already).
	again bool

	// Of the last round: the limit a quorum of nodes hold the permits with
	// (mismatch), and the permits they reported free or holding the token.
	mismatch, mismatches int
	free                 map[int]int // permit → nodes
	held                 map[int]int // permit → nodes where the token holds it already
	soonest              map[int]int // permit → nodes where it expires first of all, when none is free
}

// parser parses the replies of a round that asked for permit p. A node where
// the token holds another permit already, or where the permits are held with
// another limit, refuses p: its acqReply says which (permit, mismatch).
func (s *semAttempt) parser(p int) func(*redis.Cmd) (acqReply, error) {
	return func(cmd *redis.Cmd) (acqReply, error) {
		r, err := parsePermitAcquire(cmd)
		if err != nil || r.permit == p || !r.ok {
			return r, err
		}
		return acqReply{pttl: -1, permit: r.permit, free: r.free}, nil // the token holds another permit here
	}
}

// tally is t.add, noting what the answers say about the permits first.
func (s *semAttempt) tally(t *acqTally) func(reply[acqReply]) bool {
	s.mismatches, s.mismatch = 0, 0
	s.free, s.held, s.soonest = map[int]int{}, map[int]int{}, map[int]int{}
	return func(r reply[acqReply]) bool {
		if r.err == nil {
			switch v := r.val; {
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
func (s *semAttempt) after(err error, quorum int) error {
	if err == nil {
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
	s.again = len(s.held) > 0 || s.free[s.prefer] >= quorum
	return err
}

// freed makes a permit whose release woke the waiter the next one to ask for.
func (s *semAttempt) freed(permit int) {
	if s != nil && permit >= 0 && permit < s.limit {
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
