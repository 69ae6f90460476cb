package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/valid"
)

// Semaphores (docs/semaphores.md): at most Limit holders at once. Each permit i of a
// semaphore S is a lock of its own (S#i), so two holders of one permit
// conflict pairwise and Redlock's quorum argument holds per permit; the
// permits share one fence counter (fencing tokens increase across every
// permit of S) and one queue of waiters (a release of any permit wakes it).

// MaxLimit is the largest limit of a semaphore.
const MaxLimit = valid.MaxLimit

// ErrLimitMismatch means the semaphore's permits are held with another
// limit. The returned error is a *LimitError.
var ErrLimitMismatch = errors.New("redlock: the semaphore's permits are held with another limit")

// LimitError is returned by AcquirePermit when the permits held have another
// limit than the one asked for.
type LimitError struct {
	Limit int // the limit of the permits held
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v (%d)", ErrLimitMismatch, e.Limit)
}

// Unwrap returns ErrLimitMismatch.
func (e *LimitError) Unwrap() error { return ErrLimitMismatch }

// PermitOptions are AcquirePermit's options: those of a lock, and the limit.
type PermitOptions struct {
	AcquireOptions
	// Limit is the number of permits, 1..MaxLimit. Required.
	Limit int
}

// Permit is a permit of a semaphore acquired or extended on a quorum of
// nodes: a Lock whose Resource is the semaphore's name, with the limit and
// the permit's index. Fence is strictly greater than every fence handed out
// before for any permit of the semaphore.
type Permit struct {
	Lock
	Limit int
	Index int // 0..Limit-1
}

// SemaphoreInfo is what InspectSemaphore tells: the permits held on a
// quorum, never their tokens.
type SemaphoreInfo struct {
	Namespace, Name string
	Limit           int          // the limit of the permits held; 0 when none is
	Permits         []PermitInfo // by index
}

// PermitInfo is one held permit.
type PermitInfo struct {
	Index     int
	Owner     string
	Fence     int64
	Remaining time.Duration
	HeldNodes int
}

// semKeys returns a semaphore's keys: those of a lock named name + "#",
// whose lock and meta keys are the prefixes of its permits' (permit i:
// prefix + i), then the index of its permits on a node (see permits.lua):
// its limit key (the limit of the permits held on the node), its permits
// key (each permit held → when it expires) and its holders key (each
// holder's token → its permit). Names never contain '#'. Its readers, rmeta
// and wwait keys never exist: a semaphore has no readers, and its waiters
// never enter wwait.
func (c *Coordinator) semKeys(namespace, name string) []string {
	base := namespace + "/" + name + "#"
	p := c.opts.KeyPrefix
	return append(c.keys(namespace, name+"#"), p+"limit:"+base, p+"permits:"+base, p+"holders:"+base)
}

// The positions of the index's keys in semKeys: limit, permits and
// holders, which every permit script takes after a lock script's KEYS.
const (
	semLimit = 8 + iota
	semPermits
	semHolders
)

// target is what a round works on: a lock, or a semaphore, whose scripts
// (permitScripts) run the lock's on the permit that the token holds on each
// node, found in the node's index of the permits (permits.lua).
type target struct {
	keys   []string // see keys, or semKeys
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

// with returns keys, and a semaphore's index keys (limit, permits,
// holders) after them.
func (tg target) with(keys []string) []string {
	if tg.sem {
		return append(slices.Clip(keys), tg.keys[semLimit:]...)
	}
	return keys
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

// permitReply splits a permit script's reply, {permit, reply, extra} (see
// permit_find.lua), into the permit, a command holding the lock script's
// reply, and extra.
func permitReply(cmd *redis.Cmd) (permit int, body *redis.Cmd, extra any, err error) {
	v, err := cmd.Slice()
	if err != nil {
		return -1, nil, nil, err
	}
	if len(v) != 3 {
		return -1, nil, nil, fmt.Errorf("unexpected permit reply %v", v)
	}
	body = redis.NewCmd(context.Background())
	body.SetVal(v[1])
	return int(toInt(v[0])), body, v[2], nil
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
		permit, body, free, err := permitReply(cmd)
		if err != nil {
			return acqReply{}, err
		}
		r := acqReply{pttl: -1, permit: permit}
		if fv, ok := free.([]any); ok {
			for _, f := range fv {
				r.free = append(r.free, int(toInt(f)))
			}
		}
		if v, _ := body.Slice(); len(v) == 2 && toInt(v[0]) == -2 {
			r.mismatch = int(toInt(v[1]))
			return r, nil
		}
		if a, err := parseAcquire(body); err != nil {
			return acqReply{}, err
		} else if permit == p || !a.ok {
			a.permit, a.free = permit, r.free
			return a, nil
		}
		return r, nil // the token holds another permit here
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

// acquireOnce is AcquirePermit without a wait: a round, and at most two
// more when the refusals show another permit that can be granted at once.
func (c *Coordinator) acquirePermitOnce(ctx context.Context, a *attempt) (Lock, error) {
	if lock, done, err := a.queued(ctx); done {
		return lock, err
	}
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			a.abandon(ctx)
			return Lock{}, errors.Join(ErrQuorumUnavailable, err)
		}
		lock, err := a.run(ctx)
		if err == nil {
			return lock, nil
		}
		if i == 2 || !a.sem.again || !errors.Is(err, ErrLockHeld) {
			a.abandon(ctx)
			if ctx.Err() != nil {
				err = errors.Join(err, ctx.Err())
			}
			return Lock{}, err
		}
	}
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

// AcquirePermit takes a permit of the semaphore name, trying again while
// o.Wait lasts (waiting acquires are served first come, first served, and
// woken by the release of any permit). May return ErrInvalid, a *HeldError
// (ErrLockHeld: every permit is held), a *LimitError (ErrLimitMismatch) or
// ErrQuorumUnavailable.
func (c *Coordinator) AcquirePermit(ctx context.Context, name string, o PermitOptions) (Permit, error) {
	if o.Limit < 1 || o.Limit > MaxLimit {
		return Permit{}, invalid("limit must be within [1, %d]", MaxLimit)
	}
	a, err := c.newAttempt(name, o.AcquireOptions)
	if err != nil {
		return Permit{}, err
	}
	if a.read {
		return Permit{}, invalid("a semaphore has no read mode")
	}
	a.keys = c.semKeys(o.Namespace, name)
	a.sem = &semAttempt{limit: o.Limit, prefer: rand.N(o.Limit)}
	var lock Lock
	if o.Wait == 0 {
		lock, err = c.acquirePermitOnce(ctx, a)
	} else {
		lock, err = c.acquireWaiting(ctx, a, o.Wait)
	}
	if err != nil {
		return Permit{}, err
	}
	return Permit{Lock: lock, Limit: o.Limit, Index: a.sem.prefer}, nil
}

// ExtendPermit makes the permit held with token valid for ttl from now
// (DefaultTTL when 0). May return ErrInvalid, ErrLockExpired (the permit is
// lost) or ErrQuorumUnavailable.
func (c *Coordinator) ExtendPermit(ctx context.Context, namespace, name, token string, ttl time.Duration) (Permit, error) {
	lock, p, err := c.extend(ctx, true, namespace, name, token, ttl)
	if err != nil {
		return Permit{}, err
	}
	p.Lock = lock
	return p, nil
}

// ReleasePermit releases the permit held with token; idempotent as Release.
// When an acquire of this coordinator waits for a permit of the semaphore,
// the permit is handed over to it in the same round (see handOver). May
// return ErrInvalid, ErrLockExpired or ErrQuorumUnavailable.
func (c *Coordinator) ReleasePermit(ctx context.Context, namespace, name, token string) error {
	if err := c.checkName(namespace, name, token); err != nil {
		return err
	}
	tg := target{keys: c.semKeys(namespace, name), sem: true}
	if w := c.hub.claim(tg.keys[0], fingerprint(token)); w != nil {
		return c.handOver(ctx, tg, token, w)
	}
	return c.release(ctx, tg, token)
}

// handOverReply is a node's answer to permit_handover.lua: the permit, the
// release's answer (as release.lua's) and the acquire's (as acquire.lua's).
type handOverReply struct {
	permit   int
	released int64
	acq      acqReply
}

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
func (c *Coordinator) handOver(ctx context.Context, tg target, token string, w *waiter) error {
	a := w.a
	c.stats.attempts.Add(1)
	start := time.Now()
	rel := votes{n: len(c.nodes), q: c.quorum}
	t := &acqTally{votes: votes{n: len(c.nodes), q: c.quorum}, a: a, tg: a.target(), minFence: math.MaxInt64}
	var errs []error
	keys := tg.with(append(slices.Clip(tg.keys[:4]), releaseKeys(tg.keys, token)[3]))
	args := []any{token, c.released, c.opts.MaxTTL.Milliseconds(), a.token, a.ttl.Milliseconds(), a.owner, c.fenceIdle(), fenceFloor()}
	// The waiter gets one permit: the one of the first node that handed one
	// over (the releasing token may hold different permits on different
	// nodes, left by a client token's rounds on several). Grants of another
	// permit count as refusals, and are undone.
	acqDecided, permit := false, -1
	var stray []int
	_, rd := runScript(ctx, c, c.idxs, scriptPermitHandover, keys, args, parseHandOver, func(r reply[handOverReply]) bool {
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
				a.sem.prefer, t.tg.permit = permit, permit
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

func parseHandOver(cmd *redis.Cmd) (handOverReply, error) {
	permit, released, acq, err := permitReply(cmd)
	if err != nil {
		return handOverReply{}, err
	}
	r := handOverReply{permit: permit}
	if r.released, err = released.Int64(); err != nil {
		return handOverReply{}, err
	}
	body := redis.NewCmd(context.Background())
	body.SetVal(acq)
	r.acq, err = parseAcquire(body)
	r.acq.permit, r.acq.pttl = permit, cmp.Or(r.acq.pttl, -1)
	return r, err
}

// InspectSemaphore tells which permits of the semaphore a quorum holds (each
// permit as Inspect tells a lock). A semaphore with no permit held is a
// SemaphoreInfo with Limit 0 and no error. It waits for every node's answer,
// at most the node timeout. May return ErrInvalid or ErrQuorumUnavailable.
func (c *Coordinator) InspectSemaphore(ctx context.Context, namespace, name string) (SemaphoreInfo, error) {
	if err := c.checkName(namespace, name); err != nil {
		return SemaphoreInfo{}, err
	}
	keys := c.semKeys(namespace, name)
	type holder struct {
		permit int
		token  string
	}
	type group struct {
		count int
		fence fenceChoice
		info  PermitInfo
	}
	groups := map[holder]*group{}
	limits := map[int]int{}
	answered := 0
	var errs []error
	replies, rd := runScript(ctx, c, c.idxs, scriptPermitInspect, append([]string{keys[0], keys[1]}, keys[semLimit:]...), nil, func(cmd *redis.Cmd) ([]any, error) { return cmd.Slice() }, nil)
	rd.stragglers(nil)
	for _, r := range replies {
		if r.err == nil && c.nodes[r.node].quarantined(time.Now()) {
			r.err = c.nodes[r.node].fail(errQuarantined)
		}
		if r.err != nil || len(r.val) == 0 {
			errs = append(errs, cmp.Or(r.err, errors.New("empty inspect reply")))
			continue
		}
		answered++
		if l := int(toInt(r.val[0])); l > 0 {
			limits[l]++
		}
		for _, e := range r.val[1:] {
			v, ok := e.([]any)
			if !ok || len(v) != 6 {
				continue
			}
			h := holder{permit: int(toInt(v[0]))}
			h.token, _ = v[1].(string)
			g := groups[h]
			if g == nil {
				g = &group{info: PermitInfo{Index: h.permit, Remaining: time.Duration(toInt(v[2])) * time.Millisecond}}
				groups[h] = g
			}
			g.count++
			g.info.Remaining = min(g.info.Remaining, time.Duration(toInt(v[2]))*time.Millisecond)
			fence, committed, owner := recorded(v[3:])
			g.fence.add(committed, fence)
			g.info.Owner = owner
		}
	}
	if answered < c.quorum {
		return SemaphoreInfo{}, unavailable(errs)
	}
	info := SemaphoreInfo{Namespace: namespace, Name: name}
	for _, g := range groups {
		if g.count >= c.quorum {
			g.info.HeldNodes = g.count
			g.info.Fence, _ = g.fence.value(c.quorum)
			info.Permits = append(info.Permits, g.info)
		}
	}
	slices.SortFunc(info.Permits, func(a, b PermitInfo) int { return a.Index - b.Index })
	if len(info.Permits) > 0 {
		info.Limit = most(limits)
	}
	return info, nil
}
