package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// Coordinator runs the Redlock algorithm over N independent Redis masters.
// It is safe for concurrent use; it holds no per-lock state, so any number
// of coordinators (gateway replicas) may share the same nodes.
type Coordinator struct {
	opts     Options
	nodes    []*node
	quorum   int
	hub      waitHub // waiting acquires
	stats    counters
	idxs     []int  // every node's index: read-only
	released string // the channel of release announcements
}

// New returns a Coordinator over one client per node, made from the given
// go-redis options (their timeouts and retries are overridden so that each
// command is bounded by Options.NodeTimeout and never retried). It validates
// opts once. May return ErrInvalid.
func New(nodes []*redis.Options, opts Options) (*Coordinator, error) {
	if len(nodes) == 0 {
		return nil, invalid("no nodes")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &Coordinator{opts: opts, quorum: len(nodes)/2 + 1, released: opts.KeyPrefix + "released"}
	for i, o := range nodes {
		if o == nil {
			return nil, invalid("node %d has no options", i)
		}
		n, err := newNode(i, o, opts)
		if err != nil {
			for _, n := range c.nodes {
				n.client.Close()
			}
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		c.idxs = append(c.idxs, i)
	}
	c.hub.start(c) // release announcements wake waiting acquires
	for _, n := range c.nodes {
		n.startHealth()
	}
	if len(nodes) == 1 {
		opts.Logger.Warn().Msg("redlock: a single node gives no fault tolerance: if it fails or restarts, locks are lost")
	}
	return c, nil
}

// Nodes is N, the number of nodes.
func (c *Coordinator) Nodes() int { return len(c.nodes) }

// Quorum is the number of nodes needed: N/2 + 1.
func (c *Coordinator) Quorum() int { return c.quorum }

// Options returns the effective options, defaults filled in.
func (c *Coordinator) Options() Options { return c.opts }

// Close closes every node's client.
func (c *Coordinator) Close() error {
	errs := []error{c.hub.close()}
	for _, n := range c.nodes {
		n.stopHealth()
		errs = append(errs, n.client.Close())
	}
	return errors.Join(errs...)
}

// keys returns the lock, meta, fence and waiting keys of a resource, and
// the prefix of its release tombstones (see releaseKeys). Names never
// contain '/', so namespace and resource cannot collide across namespaces.
func (c *Coordinator) keys(namespace, resource string) []string {
	base := namespace + "/" + resource
	p := c.opts.KeyPrefix
	return []string{p + "lock:" + base, p + "meta:" + base, p + "fence:" + base, p + "waiting:" + base, p + "released:" + base}
}

// validity is what is left of ttl after elapsed time and clock drift.
func (c *Coordinator) validity(ttl time.Duration, start time.Time) time.Duration {
	drift := time.Duration(float64(ttl)*c.opts.DriftFactor) + constDrift
	return ttl - time.Since(start) - drift
}

// checkName checks a namespace, a resource and the tokens given.
func (c *Coordinator) checkName(namespace, resource string, tokens ...string) error {
	if namespace != "" && !ValidName(namespace) {
		return invalid("namespace must be 1-%d characters of [A-Za-z0-9._:-], other than . and ..", MaxNameLen)
	}
	if !ValidName(resource) {
		return invalid("resource must be 1-%d characters of [A-Za-z0-9._:-], other than . and ..", MaxNameLen)
	}
	for _, t := range tokens {
		if !ValidToken(t) {
			return invalid(errToken)
		}
	}
	return nil
}

const errToken = "token must be 22-128 characters of [A-Za-z0-9_-]"

func (c *Coordinator) ttlOrDefault(ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return c.opts.DefaultTTL, nil
	}
	if ttl < MinTTL || ttl > c.opts.MaxTTL {
		return 0, invalid("ttl must be within [%d, %d] ms", MinTTL.Milliseconds(), c.opts.MaxTTL.Milliseconds())
	}
	return ttl, nil
}

// Acquire takes the lock on resource, trying again after a jittered delay
// while o.Wait lasts. May return ErrInvalid, a *HeldError (ErrLockHeld) or
// ErrQuorumUnavailable, joined with ctx.Err() when the context ended the wait.
func (c *Coordinator) Acquire(ctx context.Context, resource string, o AcquireOptions) (Lock, error) {
	a, err := c.newAttempt(resource, o)
	if err != nil {
		return Lock{}, err
	}
	if o.Wait == 0 {
		return c.acquireOnce(ctx, a)
	}
	return c.acquireWaiting(ctx, a, o.Wait)
}

// newAttempt checks o and resource and returns the attempt to take the lock.
func (c *Coordinator) newAttempt(resource string, o AcquireOptions) (*attempt, error) {
	if err := c.checkName(o.Namespace, resource); err != nil {
		return nil, err
	}
	ttl, err := c.ttlOrDefault(o.TTL)
	if err != nil {
		return nil, err
	}
	if o.Wait < 0 || o.Wait > c.opts.MaxWait {
		return nil, invalid("wait must be within [0, %d] ms", c.opts.MaxWait.Milliseconds())
	}
	if o.Token != "" && !ValidToken(o.Token) {
		return nil, invalid(errToken)
	}
	if utf8.RuneCountInString(o.Owner) > MaxOwnerLen {
		return nil, invalid("owner must be at most %d characters", MaxOwnerLen)
	}
	a := &attempt{c: c, ns: o.Namespace, resource: resource, keys: c.keys(o.Namespace, resource),
		token: o.Token, chosen: o.Token != "", ttl: ttl, owner: o.Owner}
	if !a.chosen {
		a.token = NewToken()
	}
	return a, nil
}

// acquireOnce is Acquire without a wait: one round.
func (c *Coordinator) acquireOnce(ctx context.Context, a *attempt) (Lock, error) {
	if c.hub.waiters(a.keys[0]) > 0 {
		// Others are waiting for this lock here: it is theirs first.
		c.stats.held.Add(1)
		return Lock{}, &HeldError{}
	}
	if err := ctx.Err(); err != nil {
		return Lock{}, errors.Join(ErrQuorumUnavailable, err)
	}
	a.last = true
	lock, err := a.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return lock, err
}

// interest tells acquire.lua whether to ask for release announcements: 0
// no (nobody waits), 1 when refused (this acquire will wait), 2 also when
// granted (others wait behind it here).
func (a *attempt) interest() int {
	switch {
	case !a.waiting:
		return 0
	case a.c.hub.waiters(a.keys[0]) > 1:
		return 2
	}
	return 1
}

// releaseKeys are the keys release.lua takes: lock, meta, waiting, and the
// tombstone of token's release, released:<ns>/<resource>/<token> (a token
// never contains '/').
func releaseKeys(keys []string, token string) []string {
	return []string{keys[0], keys[1], keys[3], keys[4] + "/" + token}
}

// undo releases a.token on the nodes idxs without leaving a tombstone: the
// attempt failed, so no release of it can be retried.
func (a *attempt) undo(ctx context.Context, idxs []int) {
	runScript(ctx, a.c, idxs, scriptRelease, releaseKeys(a.keys, a.token), []any{a.token, a.c.released, 0}, (*redis.Cmd).Int64)
}

// jitter returns a duration uniformly in [d/2, 3d/2).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d)
}

// attempt is one lock being acquired: the same token for every round.
type attempt struct {
	c        *Coordinator
	ns       string
	resource string
	keys     []string
	token    string
	chosen   bool // the caller chose the token (idempotent acquire)
	last     bool // no round follows this one
	// waiting is set for a waiting acquire: its rounds ask the nodes to
	// announce the lock's release (see interest).
	waiting bool
	ttl     time.Duration
	owner   string
}

type acqReply struct {
	ok        bool
	existing  bool // the token held it already
	committed bool // existing, and its fence is the chosen one (not the node's tentative one)
	fence     int64
	counter   int64 // existing: the node's fence counter
	pttl      int64 // the other holder's remaining TTL, when !ok
}

// run is one round: SET NX PX on every node in parallel, then the fence
// commit. On failure it releases what this round may have set.
func (a *attempt) run(ctx context.Context) (Lock, error) {
	c := a.c
	c.stats.attempts.Add(1)
	start := time.Now()
	replies := runScript(ctx, c, c.idxs, scriptAcquire, a.keys, []any{a.token, a.ttl.Milliseconds(), a.owner, a.interest()}, func(cmd *redis.Cmd) (acqReply, error) {
		v, err := cmd.Slice()
		if err != nil {
			return acqReply{}, err
		}
		switch {
		case len(v) == 4 && toInt(v[0]) == 1:
			return acqReply{ok: true, fence: toInt(v[1])}, nil
		case len(v) == 5 && toInt(v[0]) == 1:
			return acqReply{ok: true, fence: toInt(v[1]), existing: true, committed: toInt(v[3]) == 1, counter: toInt(v[4])}, nil
		case len(v) == 2 && toInt(v[0]) == 0:
			return acqReply{pttl: toInt(v[1])}, nil
		}
		return acqReply{}, fmt.Errorf("unexpected acquire reply %v", v)
	})
	var (
		ok              int
		newFence        int64 // the greatest fence of a fresh node, or counter+1 of an existing one
		minFence        int64 = math.MaxInt64
		maxFence        int64
		existing        []acqReply // voting nodes where the token held the lock already
		pttls           []int64
		answered, fresh []int
		undo            []int // nodes whose SET may have landed: all but those that refused
		errs            []error
	)
	now := time.Now()
	for _, r := range replies {
		quarantined := c.nodes[r.node].quarantined(now)
		if r.err != nil || r.val.ok {
			undo = append(undo, r.node)
		}
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
			continue
		case r.val.ok && quarantined:
			// its SET landed but it does not vote: undo it on failure
			errs = append(errs, c.nodes[r.node].fail(errQuarantined))
			if !r.val.existing {
				fresh = append(fresh, r.node)
			}
		case r.val.ok && r.val.existing:
			ok++
			existing = append(existing, r.val)
			newFence = max(newFence, r.val.counter+1)
			minFence, maxFence = min(minFence, r.val.fence), max(maxFence, r.val.fence)
		case r.val.ok:
			ok++
			newFence = max(newFence, r.val.fence)
			minFence, maxFence = min(minFence, r.val.fence), max(maxFence, r.val.fence)
			fresh = append(fresh, r.node)
		default:
			pttls = append(pttls, r.val.pttl)
		}
		answered = append(answered, r.node)
	}
	if ok >= c.quorum {
		fence, kept := newFence, keptFence(existing, c.quorum)
		if kept > 0 {
			fence = kept // idempotent re-acquire keeps its fencing token
		}
		// When every node newly granted the lock with the same fence,
		// every counter and record already holds it: nothing to write
		// back. A chosen token's fence is always written back, so that a
		// re-acquire can tell its records from those of a failed attempt
		// (see keptFence).
		committed, held := ok, ok
		if ok < len(c.nodes) || minFence != maxFence || len(existing) > 0 || a.chosen {
			committed, held = a.commit(ctx, answered, fence)
		}
		validity := c.validity(a.ttl, start)
		if committed >= c.quorum && held >= c.quorum && validity > 0 {
			c.stats.acquired.Add(1)
			return Lock{
				Namespace: a.ns, Resource: a.resource, Token: a.token, Fence: fence, Owner: a.owner,
				TTL: a.ttl, Validity: validity, Start: start, Until: start.Add(validity),
				Nodes: len(c.nodes), Quorum: c.quorum, Locked: held,
			}, nil
		}
	}
	// Failed: undo. A random token is ours alone: release it wherever its SET
	// may have landed. A caller-chosen token may hold the lock from an
	// earlier call: only undo what this round newly set.
	if a.chosen {
		undo = fresh
	}
	// Nodes that answered are undone before returning, so that the caller's
	// next request finds them free. After a last round, silent nodes are
	// undone in the background, so the caller waits for them once, not twice.
	var later []int
	if a.last && !a.chosen {
		answeredBy := func(i int) bool { return slices.Contains(answered, i) }
		later = slices.DeleteFunc(slices.Clone(undo), answeredBy)
		undo = slices.DeleteFunc(undo, func(i int) bool { return !answeredBy(i) })
	}
	undoCtx := context.WithoutCancel(ctx)
	if len(undo) > 0 {
		a.undo(undoCtx, undo)
	}
	if len(later) > 0 {
		go a.undo(undoCtx, later)
	}
	if ok > 0 && len(pttls) < c.quorum {
		c.stats.split.Add(1) // neither this round nor any other owner won a quorum
	}
	if ok+len(errs) < c.quorum {
		c.stats.held.Add(1)
		return Lock{}, &HeldError{Remaining: freeIn(pttls, len(c.nodes), c.quorum)}
	}
	c.stats.unavailable.Add(1)
	return Lock{}, unavailable(errs)
}

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
	var f int64
	n := 0
	for _, r := range existing {
		switch {
		case !r.committed:
		case r.fence > f:
			f, n = r.fence, 1
		case r.fence == f:
			n++
		}
	}
	if f == 0 || n < quorum {
		return 0
	}
	return f
}

// commit writes the chosen fence back to every node that answered, so that
// any later quorum reads a counter at least this high. It returns how many
// nodes took it and on how many the token holds the lock.
func (a *attempt) commit(ctx context.Context, idxs []int, fence int64) (committed, held int) {
	replies := runScript(ctx, a.c, idxs, scriptCommit, a.keys, []any{a.token, fence}, (*redis.Cmd).Int64)
	now := time.Now()
	for _, r := range replies {
		if r.err == nil && !a.c.nodes[r.node].quarantined(now) {
			committed++
			if r.val == 1 {
				held++
			}
		}
	}
	return committed, held
}

// freeIn estimates when a lock held on the nodes with these remaining TTLs
// (ms) will be free on a quorum: the k-th smallest TTL, where k nodes must
// expire for a quorum to be free. 0 if unknown.
func freeIn(pttls []int64, nodes, quorum int) time.Duration {
	k := quorum - (nodes - len(pttls)) // holders that must expire
	if k <= 0 || k > len(pttls) {
		return 0
	}
	slices.Sort(pttls)
	if pttls[k-1] <= 0 {
		return 0
	}
	return time.Duration(pttls[k-1]) * time.Millisecond
}

// unavailable is ErrQuorumUnavailable joined with the errors of the nodes
// that did not vote.
func unavailable(errs []error) error {
	return errors.Join(append([]error{ErrQuorumUnavailable}, errs...)...)
}

// notOwner tells ErrHeldByOther from ErrLockExpired by how many nodes
// answered that another token holds the lock.
func (c *Coordinator) notOwner(other int) error {
	if other >= c.quorum {
		return ErrHeldByOther
	}
	return ErrLockExpired
}

// Release deletes the lock on every node where token holds it. It succeeds
// iff the token held the lock on a quorum. It is idempotent: each node keeps
// a tombstone of the token's release for max TTL, so a retried release
// succeeds again, even after another token took the lock. May return
// ErrInvalid, ErrLockExpired or ErrHeldByOther (the token cannot have held a
// quorum), or ErrQuorumUnavailable (too many nodes silent to tell).
func (c *Coordinator) Release(ctx context.Context, namespace, resource, token string) error {
	if err := c.checkName(namespace, resource, token); err != nil {
		return err
	}
	keys := releaseKeys(c.keys(namespace, resource), token)
	keep := c.opts.MaxTTL.Milliseconds()
	replies := runScript(ctx, c, c.idxs, scriptRelease, keys, []any{token, c.released, keep}, (*redis.Cmd).Int64)
	var matched, other int
	var errs []error
	now := time.Now()
	for _, r := range replies {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.val == 1 || r.val == 2:
			// Released now, or by this token within max TTL (a retry
			// of a release whose answer was lost).
			matched++
		case c.nodes[r.node].quarantined(now):
			// It may have lost the lock in its restart: its "no" proves nothing.
			errs = append(errs, c.nodes[r.node].fail(errQuarantined))
		case r.val == -1:
			other++
		}
	}
	switch {
	case matched >= c.quorum:
		return nil
	case matched+len(errs) < c.quorum:
		return c.notOwner(other)
	}
	return unavailable(errs)
}

type extReply struct {
	state     int64 // 1 extended, 0 absent, -1 other token
	fence     int64
	committed bool // fence is the chosen one, not the node's tentative one
	owner     string
}

// Extend makes the lock valid for ttl from now (DefaultTTL when ttl is 0).
// While a quorum still holds the token it also puts the lock back on nodes
// where it vanished (a restarted node). May return ErrInvalid,
// ErrLockExpired or ErrHeldByOther (the lock is lost), or
// ErrQuorumUnavailable (too many nodes silent to tell).
func (c *Coordinator) Extend(ctx context.Context, namespace, resource, token string, ttl time.Duration) (Lock, error) {
	if err := c.checkName(namespace, resource, token); err != nil {
		return Lock{}, err
	}
	ttl, err := c.ttlOrDefault(ttl)
	if err != nil {
		return Lock{}, err
	}
	keys := c.keys(namespace, resource)
	start := time.Now()
	replies := runScript(ctx, c, c.idxs, scriptExtend, keys[:2], []any{token, ttl.Milliseconds()}, func(cmd *redis.Cmd) (extReply, error) {
		v, err := cmd.Slice()
		if err != nil || len(v) == 0 {
			return extReply{}, errors.Join(err, errors.New("empty extend reply"))
		}
		r := extReply{state: toInt(v[0])}
		if r.state == 1 && len(v) == 4 {
			r.fence, r.committed, r.owner = recorded(v[1:])
		}
		return r, nil
	})
	var extended, other int
	var absent []int
	var errs []error
	var fence fenceChoice
	var owner string
	now := time.Now()
	for _, r := range replies {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case c.nodes[r.node].quarantined(now):
			errs = append(errs, c.nodes[r.node].fail(errQuarantined))
			if r.val.state == 0 {
				absent = append(absent, r.node) // put it back, though it does not vote
			}
		case r.val.state == 1:
			extended++
			fence.add(r.val.committed, r.val.fence)
			owner = r.val.owner
		case r.val.state == 0:
			absent = append(absent, r.node)
		default:
			other++
		}
	}
	if extended >= c.quorum && c.validity(ttl, start) > 0 {
		fence := fence.value()
		if len(absent) > 0 {
			// The quorum holds: put the lock back where it vanished.
			rs := runScript(ctx, c, absent, scriptReassert, keys, []any{token, ttl.Milliseconds(), fence, owner}, (*redis.Cmd).Int64)
			now := time.Now()
			for _, r := range rs {
				if r.err == nil && r.val == 1 && !c.nodes[r.node].quarantined(now) {
					extended++
				}
			}
		}
		if validity := c.validity(ttl, start); validity > 0 {
			return Lock{
				Namespace: namespace, Resource: resource, Token: token, Fence: fence, Owner: owner,
				TTL: ttl, Validity: validity, Start: start, Until: start.Add(validity),
				Nodes: len(c.nodes), Quorum: c.quorum, Locked: extended,
			}, nil
		}
	}
	if extended+len(errs) < c.quorum {
		return Lock{}, c.notOwner(other)
	}
	return Lock{}, unavailable(errs)
}

// Inspect tells who holds the lock (never the token). The lock is held when
// a quorum of nodes hold the same token. May return ErrInvalid, ErrNotHeld or
// ErrQuorumUnavailable (too many nodes silent to tell).
func (c *Coordinator) Inspect(ctx context.Context, namespace, resource string) (Info, error) {
	if err := c.checkName(namespace, resource); err != nil {
		return Info{}, err
	}
	keys := c.keys(namespace, resource)[:2]
	type state struct {
		token       string
		pttl, fence int64
		committed   bool
		owner       string
	}
	replies := runScript(ctx, c, c.idxs, scriptInspect, keys, nil, func(cmd *redis.Cmd) (state, error) {
		v, err := cmd.Slice()
		if errors.Is(err, redis.Nil) {
			return state{}, nil
		}
		if err != nil || len(v) < 5 {
			return state{}, err
		}
		s := state{pttl: toInt(v[1])}
		s.token, _ = v[0].(string)
		s.fence, s.committed, s.owner = recorded(v[2:])
		return s, nil
	})
	type group struct {
		count int
		fence fenceChoice
		info  Info
	}
	groups := map[string]*group{}
	best := &group{}
	var errs []error
	now := time.Now()
	for _, r := range replies {
		if r.err == nil && c.nodes[r.node].quarantined(now) {
			r.err = c.nodes[r.node].fail(errQuarantined)
		}
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		if r.val.token == "" {
			continue
		}
		g := groups[r.val.token]
		if g == nil {
			g = &group{info: Info{Namespace: namespace, Resource: resource, Remaining: time.Duration(r.val.pttl) * time.Millisecond}}
			groups[r.val.token] = g
		}
		g.count++
		g.info.Remaining = min(g.info.Remaining, time.Duration(r.val.pttl)*time.Millisecond)
		g.fence.add(r.val.committed, r.val.fence)
		g.info.Fence, g.info.Owner = g.fence.value(), r.val.owner
		if g.count > best.count {
			best = g
		}
	}
	switch {
	case best.count >= c.quorum:
		best.info.HeldNodes = best.count
		return best.info, nil
	case best.count+len(errs) >= c.quorum:
		return Info{}, unavailable(errs)
	}
	return Info{}, ErrNotHeld
}

// Warm opens every node's connections in parallel, each bounded by timeout,
// so that the first requests do not pay for dialling (and a restarted node's
// quarantine is known before them). Nodes that do not answer are tried again
// on every request.
func (c *Coordinator) Warm(ctx context.Context, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if n.client.Ping(ctx).Err() == nil && n.pipe != nil {
				_ = n.pipe.Ping(ctx).Err()
			}
		})
	}
	wg.Wait()
}

// fenceChoice picks the fence recorded beside a lock from several nodes'
// records: the chosen fence (written back by commit.lua) wherever a node has
// it, else the nodes' tentative fences, which are all equal when the write-
// back was skipped. A node that missed the write-back keeps its own tentative
// fence and must not be believed over the chosen one.
type fenceChoice struct{ committed, tentative int64 }

func (f *fenceChoice) add(committed bool, v int64) {
	if committed {
		f.committed = max(f.committed, v)
	} else {
		f.tentative = max(f.tentative, v)
	}
}

func (f fenceChoice) value() int64 {
	if f.committed > 0 {
		return f.committed
	}
	return f.tentative
}

// recorded reads the 'fence', 'nf' and 'owner' fields of a lock's record:
// its fence, and whether it is the chosen one.
func recorded(v []any) (fence int64, committed bool, owner string) {
	owner, _ = v[2].(string)
	if f := toInt(v[0]); f > 0 {
		return f, true, owner
	}
	return toInt(v[1]), false, owner
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}
