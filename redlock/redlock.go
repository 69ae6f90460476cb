package redlock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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
	census   census  // the last key count (see census.go)
	stats    counters
	idxs     []int  // every node's index: read-only
	released string // the channel of release announcements
	nodeSet  string // names the nodes in their order in list cursors
	ids      *identities
	// bg counts the work left to the background: stragglers of rounds
	// (see batch.go), each bounded by about the node timeout. Close waits
	// for it.
	bg sync.WaitGroup
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
	c := &Coordinator{opts: opts, quorum: len(nodes)/2 + 1, released: opts.KeyPrefix + "released", ids: newIdentities()}
	set := fnv.New64a()
	for i, o := range nodes {
		if o == nil {
			return nil, invalid("node %d has no options", i)
		}
		n, err := newNode(i, o, opts, c.ids)
		if err != nil {
			for _, n := range c.nodes {
				n.client.Close()
			}
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		c.idxs = append(c.idxs, i)
		fmt.Fprintf(set, "%s/%d,", o.Addr, o.DB)
	}
	c.nodeSet = strconv.FormatUint(set.Sum64(), 36)
	c.hub.start(c) // release announcements wake waiting acquires
	c.startCensus()
	for _, n := range c.nodes {
		n.mark = "n=" + strconv.Itoa(len(c.nodes))
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
	c.bg.Wait()
	c.stopCensus()
	errs := []error{c.hub.close()}
	for _, n := range c.nodes {
		n.stopHealth()
		errs = append(errs, n.client.Close())
	}
	return errors.Join(errs...)
}

// keys returns the lock, meta, fence and waiting keys of a resource, the
// prefix of its release tombstones (see releaseKeys), then its readers,
// rmeta and wwait keys (see read_acquire.lua). Names never contain '/', so
// namespace and resource cannot collide across namespaces.
func (c *Coordinator) keys(namespace, resource string) []string {
	base := namespace + "/" + resource
	p := c.opts.KeyPrefix
	return []string{p + "lock:" + base, p + "meta:" + base, p + "fence:" + base, p + "waiting:" + base, p + "released:" + base,
		p + "readers:" + base, p + "rmeta:" + base, p + "wwait:" + base}
}

// pick returns the keys at positions idx: the KEYS of a script.
func pick(keys []string, idx ...int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = keys[j]
	}
	return out
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

// Acquire takes the lock on resource (o.Mode: a writer's, or a reader's),
// trying again after a jittered delay while o.Wait lasts. May return ErrInvalid, a *HeldError (ErrLockHeld) or
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
	if o.Mode != "" && o.Mode != ModeWrite && o.Mode != ModeRead {
		return nil, invalid("mode must be read or write")
	}
	a := &attempt{c: c, ns: o.Namespace, resource: resource, keys: c.keys(o.Namespace, resource),
		token: o.Token, chosen: o.Token != "", ttl: ttl, owner: o.Owner, read: o.Mode == ModeRead}
	if !a.chosen {
		a.token = NewToken()
	}
	return a, nil
}

// acquireOnce is Acquire without a wait: one round.
func (c *Coordinator) acquireOnce(ctx context.Context, a *attempt) (Lock, error) {
	if lock, done, err := a.queued(ctx); done {
		return lock, err
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

// queued answers an acquire without a wait when others are waiting for
// the lock on this coordinator (done): the lock is theirs first, so it is
// refused, with how long the lock stays held as the waiters last learned;
// but the retry of an acquire whose lock its client token holds already is
// no new acquire, and gets its lock (see retried).
func (a *attempt) queued(ctx context.Context) (lock Lock, done bool, err error) {
	c := a.c
	if !c.hub.waiting(a.lockKeys(), 0) {
		return Lock{}, false, nil
	}
	if lock, ok := a.retried(ctx); ok {
		return lock, true, nil
	}
	c.stats.held.Add(1)
	return Lock{}, true, &HeldError{Remaining: c.hub.busyFor(a.lockKeys())}
}

// retried recognises the retry of an acquire whose lock its client token
// holds already (its answer was lost): before any queueing, so that others
// waiting for the lock on this coordinator neither refuse it nor make it
// wait behind them while its own lock runs out. It re-acquires the lock as
// an extend does, with the acquire's TTL: the same fence, valid for ttl
// from now. It is false when a's token is random, or does not hold the lock
// as asked (another mode, another limit), or the nodes cannot tell: the
// acquire then goes on as any other. Callers ask only while others wait
// here: otherwise the acquire's own round re-acquires it.
func (a *attempt) retried(ctx context.Context) (Lock, bool) {
	c := a.c
	if !a.chosen {
		return Lock{}, false
	}
	if a.parts != nil {
		locks, errs := make([]Lock, len(a.parts)), make([]error, len(a.parts))
		c.each(len(a.parts), func(i int) { locks[i], _, errs[i] = c.extend(ctx, false, a.ns, a.parts[i].resource, a.token, a.ttl) })
		if multiErr(errs) != nil {
			return Lock{}, false
		}
		c.stats.acquired.Add(1)
		a.locks = locks
		return locks[0], true
	}
	lock, p, err := c.extend(ctx, a.sem != nil, a.ns, a.resource, a.token, a.ttl)
	switch {
	case err != nil, lock.Mode != a.mode(), a.sem != nil && p.Limit != a.sem.limit:
		return Lock{}, false
	case a.sem != nil:
		a.sem.prefer = p.Index
	}
	c.stats.acquired.Add(1)
	return lock, true
}

// interest tells acquire.lua whether to ask for release announcements: 0
// no (nobody waits), 1 when refused (this acquire will wait), 2 also when
// granted (others wait behind it here).
func (a *attempt) interest() int {
	switch {
	case !a.waiting:
		return 0
	case a.c.hub.waiting(a.lockKeys(), 1):
		return 2
	}
	return 1
}

// lockKeys are the lock keys of a's resources: the queues it waits in.
func (a *attempt) lockKeys() []string {
	if a.parts == nil {
		return a.keys[:1]
	}
	ks := make([]string, len(a.parts))
	for i, p := range a.parts {
		ks[i] = p.keys[0]
	}
	return ks
}

// wwait is what is left of a waiting writer's wait, in ms: a refused round
// keeps new readers out for at most that long (see acquire.lua); 0 for
// others.
func (a *attempt) wwait() int64 {
	if !a.waiting || a.read || a.sem != nil {
		return 0
	}
	return max(time.Until(a.until).Milliseconds(), 1)
}

func (a *attempt) mode() Mode {
	if a.read {
		return ModeRead
	}
	return ModeWrite
}

// releaseKeys are the keys release.lua takes: lock, meta, waiting, the
// tombstone of token's release, released:<ns>/<resource>/<token> (a token
// never contains '/'), readers and rmeta.
func releaseKeys(keys []string, token string) []string {
	return []string{keys[0], keys[1], keys[3], keys[4] + "/" + token, keys[5], keys[6]}
}

// undo releases a.token on the nodes idxs without leaving a tombstone: the
// attempt failed, so no release of it can be retried.
func (a *attempt) undo(ctx context.Context, idxs []int) {
	if a.parts != nil {
		a.c.each(len(a.parts), func(i int) { a.parts[i].undo(ctx, idxs) })
		return
	}
	tg := a.target()
	_, rd := runScript(ctx, a.c, idxs, tg.script(scriptRelease), tg.with(releaseKeys(a.keys, a.token)), []any{a.token, a.c.released, 0}, tg.int64s(), nil)
	rd.stragglers(nil)
}

// abandon undoes, in the background, what the rounds of a waiting acquire
// that ends without the lock may have left (late grants of its random
// token: see outcome and cleanup). A chosen token may be retried by its
// caller, so its keys are left to expire. A waiting writer that gives up
// before its wait ran out (its caller gone, a shutdown) also leaves the
// wwait sets at once (see acquire.lua): it no longer keeps new readers out.
func (a *attempt) abandon(ctx context.Context) {
	a.mu.Lock()
	a.over = true
	dirty := slices.Compact(slices.Sorted(slices.Values(a.dirty)))
	a.mu.Unlock()
	if len(dirty) > 0 && !a.chosen {
		a.c.bg.Go(func() { a.undo(context.WithoutCancel(ctx), dirty) })
	}
	if a.wwait() > 1 {
		a.c.bg.Go(func() { a.leaveWwait(context.WithoutCancel(ctx)) })
	}
}

// leaveWwait removes a.token from the wwait set of each of its resources on
// every node, bounded by the node timeout.
func (a *attempt) leaveWwait(ctx context.Context) {
	parts := a.parts
	if parts == nil {
		parts = []*attempt{a}
	}
	var keys []string
	for _, p := range parts {
		keys = append(keys, p.keys[7]) // wwait: see keys
	}
	ctx, cancel := context.WithTimeout(ctx, a.c.opts.NodeTimeout)
	defer cancel()
	a.c.each(len(a.c.nodes), func(i int) {
		_, _ = a.c.nodes[i].client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.ZRem(ctx, k, a.token)
			}
			return nil
		})
	})
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
	until   time.Time // when a waiting acquire's wait ends
	read    bool      // a reader's (ModeRead)
	ttl     time.Duration
	owner   string
	sem     *semAttempt // a semaphore's permit; nil for a lock
	// parts: a lock on several resources (AcquireMulti) has one attempt per
	// resource, with its token, and no keys of its own; locks are those of
	// its round that succeeded.
	parts []*attempt
	locks []Lock
	// Nodes where a failed round of a random token may have left it (it
	// failed, was silent, or granted late), to undo once no later round can
	// run (see outcome); over once a waiting acquire ended without the lock.
	mu    sync.Mutex
	dirty []int
	over  bool
}

type acqReply struct {
	ok        bool
	existing  bool // the token held it already
	committed bool // existing, and its fence is the chosen one (not the node's tentative one)
	fence     int64
	counter   int64 // existing: the node's fence counter
	pttl      int64 // the other holder's remaining TTL, when !ok
	// A semaphore's (see semAttempt.parser): the permit, the permits free on
	// the node, and the limit of the permits held there when it differs.
	permit   int
	free     []int
	mismatch int
}

func parseAcquire(cmd *redis.Cmd) (acqReply, error) {
	v, err := cmd.Slice()
	if err != nil {
		return acqReply{}, err
	}
	return acqReplyOf(v)
}

// acqReplyOf reads acquire.lua's reply.
func acqReplyOf(v []any) (acqReply, error) {
	switch {
	case len(v) == 4 && toInt(v[0]) == 1:
		return acqReply{ok: true, fence: toInt(v[1])}, nil
	case len(v) == 5 && toInt(v[0]) == 1:
		return acqReply{ok: true, fence: toInt(v[1]), existing: true, committed: toInt(v[3]) == 1, counter: toInt(v[4])}, nil
	case len(v) == 2 && toInt(v[0]) == 0:
		return acqReply{pttl: toInt(v[1])}, nil
	}
	return acqReply{}, fmt.Errorf("unexpected acquire reply %v", v)
}

// acqTally counts the answers of an acquire round.
type acqTally struct {
	votes
	a                  *attempt
	tg                 target     // the round's (a semaphore's: with its permit)
	newFence           int64      // the greatest fence of a fresh node, or counter+1 of an existing one
	minFence, maxFence int64      // over every grant, voting or not
	existing           []acqReply // voting nodes where the token held the lock already
	anyExisting        bool       // a grant, voting or not, of a token that held the lock already
	pttls              []int64
	answered           []int // nodes that answered (the fence commit goes to them)
	granted            []int // nodes that granted, voting or not
	skipped            bool  // the fence was not written back (see outcome)
	undo               []int // nodes that granted (a chosen token: newly)
	failed             []int // nodes that answered with an error: their SET may have landed
	errs               []error
}

func (t *acqTally) add(r reply[acqReply]) bool {
	c := t.a.c
	switch {
	case r.err != nil:
		t.bad++
		t.errs = append(t.errs, r.err)
		if !r.silent && !t.a.chosen {
			t.failed = append(t.failed, r.node)
		}
		return t.decided()
	case !r.val.ok:
		t.no++
		t.pttls = append(t.pttls, r.val.pttl)
	default:
		t.minFence, t.maxFence = min(t.minFence, r.val.fence), max(t.maxFence, r.val.fence)
		t.granted = append(t.granted, r.node)
		t.anyExisting = t.anyExisting || r.val.existing
		if !t.a.chosen || !r.val.existing {
			t.undo = append(t.undo, r.node) // a chosen token undoes only what it newly set
		}
		switch {
		case c.nodes[r.node].quarantined(time.Now()):
			// its SET landed but it does not vote: undo it on failure
			t.bad++
			t.errs = append(t.errs, c.nodes[r.node].fail(errQuarantined))
		case r.val.existing:
			t.yes++
			t.existing = append(t.existing, r.val)
			next := r.val.counter + 1
			if t.a.read {
				next = r.val.counter // a reader gets the last writer's fence
			}
			t.newFence = max(t.newFence, next)
		default:
			t.yes++
			t.newFence = max(t.newFence, r.val.fence)
		}
	}
	t.answered = append(t.answered, r.node)
	if !t.decided() || t.yes < t.q || len(t.existing) == 0 {
		return t.decided()
	}
	// A re-acquire waits until whether it keeps its fence is certain.
	_, n := committedFence(t.existing)
	pending := t.n - t.yes - t.no - t.bad
	return n >= t.q || n+pending < t.q
}

// run is one round: the acquire script on every node, decided at the
// quorum, then the fence commit if needed. On failure it releases what this
// round may have set.
func (a *attempt) run(ctx context.Context) (Lock, error) {
	if a.parts != nil {
		return a.runMulti(ctx)
	}
	c := a.c
	c.stats.attempts.Add(1)
	start := time.Now()
	t := &acqTally{votes: votes{n: len(c.nodes), q: c.quorum}, a: a, tg: a.target(), minFence: math.MaxInt64}
	script, keys, parse, add := scriptAcquire, pick(a.keys, 0, 1, 2, 3, 5, 6, 7), parseAcquire, t.add
	args := a.args()
	if a.read {
		script = scriptRead
	}
	if a.sem != nil {
		t.tg.permit = a.sem.prefer
		script, keys, parse, add = permitScripts[scriptAcquire], a.target().with(keys), a.sem.parser(a.sem.prefer), a.sem.tally(t)
		args = append(args, a.sem.prefer, a.sem.limit)
	}
	_, rd := runScript(ctx, c, c.idxs, script, keys, args, parse, add)
	lock, err := a.outcome(ctx, start, t)
	if a.sem != nil {
		err = a.sem.after(err, c.quorum)
	}
	rd.stragglers(func(late []reply[acqReply], silent []int) { a.finish(err == nil, lock.Fence, t, late, silent) })
	return lock, err
}

// args are acquire.lua's ARGV.
func (a *attempt) args() []any {
	return []any{a.token, a.ttl.Milliseconds(), a.owner, a.interest(), a.wwait(), a.c.fenceIdle(), fenceFloor()}
}

// fenceIdle is how long a fence counter lives after its last change, in ms
// (see fence.lua).
func (c *Coordinator) fenceIdle() int64 { return c.opts.FenceIdleTTL.Milliseconds() }

// fenceFloor is where a fence counter made anew starts: this clock in
// microseconds (see fence.lua).
func fenceFloor() int64 { return time.Now().UnixMicro() }

// outcome makes the lock from an acquire round's answers, or undoes them.
func (a *attempt) outcome(ctx context.Context, start time.Time, t *acqTally) (Lock, error) {
	if lock, ok := a.granted(ctx, start, t); ok {
		a.c.stats.acquired.Add(1)
		return lock, nil
	}
	return Lock{}, a.failed(ctx, []*acqTally{t})
}

// granted makes the lock from an acquire round's answers, writing its fence
// back if needed; false when they do not make it.
func (a *attempt) granted(ctx context.Context, start time.Time, t *acqTally) (Lock, bool) {
	c := a.c
	if t.yes < c.quorum {
		return Lock{}, false
	}
	fence, kept := t.newFence, keptFence(t.existing, c.quorum)
	if kept > 0 {
		fence = kept // idempotent re-acquire keeps its fencing token
	}
	// When every node that answered newly granted the lock with the same
	// fence, the counters of a quorum hold it already: nothing to write
	// back before answering (finish may write it back later). A chosen
	// token's fence is always written back, so that a re-acquire can tell
	// its records from those of a failed attempt (see keptFence).
	held := t.yes
	t.skipped = t.minFence == t.maxFence && !t.anyExisting && !a.chosen
	if !t.skipped {
		held, fence = c.commit(ctx, t.tg, a.token, t.answered, fence, a.read)
	}
	validity := c.validity(a.ttl, start)
	if held < c.quorum || validity <= 0 {
		return Lock{}, false
	}
	return Lock{
		Namespace: a.ns, Resource: a.resource, Token: a.token, Fence: fence, Mode: a.mode(), Owner: a.owner,
		TTL: a.ttl, Validity: validity, Start: start, Until: start.Add(validity),
		Nodes: len(c.nodes), Quorum: c.quorum, Locked: held,
	}, true
}

// failed undoes a failed acquire round and returns its error. ts are its
// tallies: one per resource of a lock on several (see runMulti), which count
// the same votes.
func (a *attempt) failed(ctx context.Context, ts []*acqTally) error {
	c, t := a.c, ts[0]
	// Undo, before returning, what the nodes that granted hold, so
	// that the caller's next round finds them free. Nodes that failed (a
	// timeout, a dropped connection) may hold it too, but may well fail
	// again, and are not waited for. An undo that could run after the next
	// round of the same token would delete what that round took (its grant
	// of an existing key), so they, late grants and silent nodes of a random
	// token are undone in the background once no later round can run (see
	// cleanup): a waiting acquire's next rounds count them as grants, and
	// one that ends without the lock undoes them then (abandon).
	c.each(len(ts), func(i int) {
		if len(ts[i].undo) > 0 {
			ts[i].a.undo(context.WithoutCancel(ctx), ts[i].undo)
		}
	})
	if len(t.failed) > 0 && !a.chosen {
		c.bg.Go(func() { a.cleanup(context.WithoutCancel(ctx), t.failed) })
	}
	if t.yes > 0 && len(t.pttls) < c.quorum {
		c.stats.split.Add(1) // neither this round nor any other owner won a quorum
	}
	if t.refused() {
		c.stats.held.Add(1)
		return &HeldError{Remaining: freeIn(t.pttls, len(c.nodes), c.quorum)}
	}
	c.stats.unavailable.Add(1)
	return unavailable(t.errs)
}

// finish deals with the answers of an acquire round that came after its
// outcome, and with the nodes still silent at the end of the node timeout.
// After a success, a late grant that recorded another fence gets the fence
// written back. If the write-back was skipped and a node may yet run its SET
// and record a fence of its own (it failed, is silent, or answered late with
// another fence), the fence is written back to every node that granted:
// extend and inspect believe it over any tentative fence (see fenceChoice).
// After a failed last round of a random token (see outcome), whatever may
// have landed is undone: late grants and errors, and silent nodes, whose SET
// may still run when a paused node resumes (then the undo may run before
// it, and the key lives one TTL: see docs/safety.md). A late grant of a
// lock that succeeded is harmless: it holds the same token, and stale keys
// alone never make a quorum.
func (a *attempt) finish(ok bool, fence int64, t *acqTally, late []reply[acqReply], silent []int) {
	undo := a.writeBack(ok, fence, t, late, silent)
	if !ok && !a.chosen {
		a.cleanup(context.Background(), append(undo, silent...))
	}
	if !ok {
		a.rejoined()
	}
}

// rejoined leaves the wwait sets again if the attempt was abandoned while a
// round was out: the round's refusals, arriving after abandon's removal,
// put the token back and would keep new readers out for the rest of the
// wait.
func (a *attempt) rejoined() {
	a.mu.Lock()
	over := a.over
	a.mu.Unlock()
	if over && a.wwait() > 1 {
		a.leaveWwait(context.Background())
	}
}

// writeBack is finish's write-back of the fence after a success; it returns
// the nodes that answered late with a grant or an error.
func (a *attempt) writeBack(ok bool, fence int64, t *acqTally, late []reply[acqReply], silent []int) (undo []int) {
	var grants []int
	odd := t.bad > 0 || len(silent) > 0
	for _, r := range late {
		odd = odd || r.err != nil
		switch {
		case r.err == nil && r.val.ok:
			if r.val.fence != fence {
				grants = append(grants, r.node)
			}
			if t.skipped {
				t.granted = append(t.granted, r.node)
			}
			undo = append(undo, r.node)
		case r.err != nil:
			undo = append(undo, r.node)
		}
	}
	if ok {
		if t.skipped && (odd || len(grants) > 0) {
			grants = t.granted
		}
		if len(grants) > 0 {
			// One claim, never a greater fence: the lock's is decided.
			a.c.claim(context.Background(), t.tg, a.token, grants, fence, a.read)
		}
	}
	return undo
}

// cleanup undoes a random token on the nodes idxs, where a failed round may
// have left it, once no later round can run: at once after a last round or
// once the attempt is over, else when it ends (abandon).
func (a *attempt) cleanup(ctx context.Context, idxs []int) {
	a.mu.Lock()
	now := a.last || a.over
	if !now {
		a.dirty = append(a.dirty, idxs...)
	}
	a.mu.Unlock()
	if now && len(idxs) > 0 {
		a.undo(ctx, idxs)
	}
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

// commitReply is a node's answer to commit.lua, and a semaphore's permit.
type commitReply struct {
	permit int
	// state: 1 the fence is recorded as the token's beside its lock, 0 the
	// token does not hold the lock here, -1 it does, but this node gave the
	// fence to another token.
	state   int64
	counter int64 // the node's fence counter after the commit
}

// commitReplyOf reads commit.lua's reply.
func commitReplyOf(v []any) (commitReply, error) {
	if len(v) != 2 {
		return commitReply{}, fmt.Errorf("unexpected commit reply %v", v)
	}
	return commitReply{state: toInt(v[0]), counter: toInt(v[1])}, nil
}

// maxClaims bounds the fences one commit tries (see commit).
const maxClaims = 4

// commit writes fence back to the nodes idxs, beside token's lock, so that
// any later quorum reads a counter at least this high, as each node's claim
// of it (see commit.lua): a writer's fence counts only on nodes that gave it
// to no other token, so no two holders of a semaphore's permits get one
// fence from a quorum. When concurrent acquires of other permits took the
// value on too many nodes, it claims a greater one, at most maxClaims times.
// A reader's (read) is the last writer's, shared: it is only recorded.
// Decided at the quorum, it returns on how many voting nodes the fence was
// recorded and the token holds the lock, and the fence.
func (c *Coordinator) commit(ctx context.Context, tg target, token string, idxs []int, fence int64, read bool) (held int, _ int64) {
	for try := 1; ; try++ {
		held, top, refused := c.claim(ctx, tg, token, idxs, fence, read)
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
func (c *Coordinator) claim(ctx context.Context, tg target, token string, idxs []int, fence int64, read bool) (held int, top int64, refused int) {
	t := &votes{n: len(idxs), q: c.quorum}
	args := []any{token, fence, c.fenceIdle(), 1}
	if read {
		args[3] = 0
	}
	_, rd := runScript(ctx, c, idxs, tg.script(scriptCommit), tg.with(pick(tg.keys, 0, 1, 2, 5, 6)), args, tg.commits(), func(r reply[commitReply]) bool {
		if r.err == nil {
			top = max(top, r.val.counter)
		}
		switch {
		case r.err != nil || c.nodes[r.node].quarantined(time.Now()):
			t.bad++
		case r.val.state == 1 && r.val.permit == tg.permit: // a semaphore's: the same permit
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

// freeIn estimates when a lock held on the nodes with these remaining TTLs
// (ms) will be free on a quorum: the k-th smallest TTL, where k nodes must
// expire for a quorum to be free (a TTL of 0 expires now: 1ms). 0 if
// unknown (a key without a TTL, -1). A round decided at the quorum has the
// TTLs of the first refusals only, so k is often 1.
func freeIn(pttls []int64, nodes, quorum int) time.Duration {
	k := quorum - (nodes - len(pttls)) // holders that must expire
	if k <= 0 || k > len(pttls) {
		return 0
	}
	slices.Sort(pttls)
	if pttls[k-1] < 0 {
		return 0
	}
	return time.Duration(max(pttls[k-1], 1)) * time.Millisecond
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
	return c.release(ctx, target{keys: c.keys(namespace, resource)}, token)
}

// release is Release of tg, whose names were checked.
func (c *Coordinator) release(ctx context.Context, tg target, token string) error {
	keep := c.opts.MaxTTL.Milliseconds()
	t := votes{n: len(c.nodes), q: c.quorum}
	var other, refused, deleted, retried int
	var errs []error
	// Deleted by permit (a lock's is permit 0): as in extend, a token holds
	// the lock only where a quorum holds one permit; a tombstone (a retried
	// release) joins whichever permit it was.
	byPermit := map[int]int{}
	best := 0
	_, rd := runScript(ctx, c, c.idxs, tg.script(scriptRelease), tg.with(releaseKeys(tg.keys, token)), []any{token, c.released, keep}, tg.releases(), func(r reply[relReply]) bool {
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

// relReply is a node's answer to release.lua (v), and a semaphore's permit.
type relReply struct {
	permit int
	v      int64
}

type extReply struct {
	state     int64 // 1 extended, 0 absent, -1 other token
	fence     int64
	committed bool // fence is the chosen one, not the node's tentative one
	owner     string
	read      bool // the token is a reader
	// A semaphore's: the permit the token holds on the node, and the limit.
	permit, limit int
}

// Extend makes the lock valid for ttl from now (DefaultTTL when ttl is 0).
// While a quorum still holds the token it also puts the lock back on nodes
// where it vanished (a restarted node). May return ErrInvalid,
// ErrLockExpired or ErrHeldByOther (the lock is lost), or
// ErrQuorumUnavailable (too many nodes silent to tell).
func (c *Coordinator) Extend(ctx context.Context, namespace, resource, token string, ttl time.Duration) (Lock, error) {
	lock, _, err := c.extend(ctx, false, namespace, resource, token, ttl)
	return lock, err
}

// extend is Extend of a lock, or of a semaphore's permit (sem, whose name is
// resource); for a semaphore it also returns the permit's index and limit,
// in a Permit without its Lock.
func (c *Coordinator) extend(ctx context.Context, sem bool, namespace, resource, token string, ttl time.Duration) (Lock, Permit, error) {
	if err := c.checkName(namespace, resource, token); err != nil {
		return Lock{}, Permit{}, err
	}
	ttl, err := c.ttlOrDefault(ttl)
	if err != nil {
		return Lock{}, Permit{}, err
	}
	tg := target{sem: sem}
	if sem {
		tg.keys = c.semKeys(namespace, resource)
	} else {
		tg.keys = c.keys(namespace, resource)
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
		yes   int
		fence fenceChoice
		owner string
		read  bool
	}
	byPermit := map[int]*held{}
	best := &held{}
	_, rd := runScript(ctx, c, c.idxs, tg.script(scriptExtend), tg.with(pick(tg.keys, 0, 1, 5, 6)), []any{token, ttl.Milliseconds()}, tg.extends(), func(r reply[extReply]) bool {
		switch {
		case r.err != nil:
			t.bad++
			errs = append(errs, r.err)
		case c.nodes[r.node].quarantined(time.Now()):
			t.bad++
			errs = append(errs, c.nodes[r.node].fail(errQuarantined))
			if r.val.state == 0 {
				absent = append(absent, r.node) // put it back, though it does not vote
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
			h.read = h.read || r.val.read
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
	if best.read {
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
	return lock, p, err
}

func parseExtend(cmd *redis.Cmd) (extReply, error) {
	v, err := cmd.Slice()
	if err != nil || len(v) == 0 {
		return extReply{}, errors.Join(err, errors.New("empty extend reply"))
	}
	r := extReply{state: toInt(v[0])}
	if r.state == 1 && len(v) >= 4 {
		r.fence, r.committed, r.owner = recorded(v[1:])
		r.read = len(v) == 5
	}
	return r, nil
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
	args := []any{token, ttl.Milliseconds(), fence, owner, string(mode), c.fenceIdle()}
	if tg.sem {
		args = append(args, p.Index, p.Limit)
	}
	_, rd := runScript(ctx, c, idxs, tg.script(scriptReassert), tg.with(pick(tg.keys, 0, 1, 2, 5, 6)), args, tg.int64s(), nil)
	rd.stragglers(nil)
}

// Inspect tells who holds the lock (never the token). The lock is held when
// a quorum of nodes hold the same token: the writer's, or readers' (Mode
// ModeRead: Readers tokens are each held on a quorum). May return ErrInvalid, ErrNotHeld or
// ErrQuorumUnavailable (too many nodes silent to tell).
func (c *Coordinator) Inspect(ctx context.Context, namespace, resource string) (Info, error) {
	if err := c.checkName(namespace, resource); err != nil {
		return Info{}, err
	}
	info, _, err := c.inspect(ctx, namespace, resource, 0)
	return info, err
}

// inspect is Inspect's round on checked names. It is decided only once the
// nodes of index below wait answered or failed too, and also returns
// the lowest index among the voting nodes that hold the lock's token (of a
// read lock, a reader's) as far as they answered (see List).
func (c *Coordinator) inspect(ctx context.Context, namespace, resource string, wait int) (Info, int, error) {
	type group struct {
		count int
		first int // the lowest index of a node that holds the token
		fence fenceChoice
		info  Info
	}
	// One group per token: of the writer's lock key, or of a reader.
	writers, readers := map[string]*group{}, map[string]*group{}
	best := &group{} // the writer held on most nodes
	add := func(groups map[string]*group, h holder, node int) *group {
		g := groups[h.token]
		if g == nil {
			g = &group{first: node, info: Info{Namespace: namespace, Resource: resource, Remaining: time.Duration(h.pttl) * time.Millisecond}}
			groups[h.token] = g
		}
		g.count++
		g.first = min(g.first, node)
		g.info.Remaining = min(g.info.Remaining, time.Duration(h.pttl)*time.Millisecond)
		g.fence.add(h.committed, h.fence)
		g.info.Owner = h.owner
		return g
	}
	var errs []error
	answers, waiting := 0, wait
	keys := pick(c.keys(namespace, resource), 0, 1, 5, 6)
	_, rd := runScript(ctx, c, c.idxs, scriptInspect, keys, nil, parseInspect, func(r reply[[]holder]) bool {
		answers++
		if r.node < wait {
			waiting--
		}
		if r.err == nil && c.nodes[r.node].quarantined(time.Now()) {
			r.err = c.nodes[r.node].fail(errQuarantined)
		}
		if r.err != nil {
			errs = append(errs, r.err)
		}
		for i, h := range r.val {
			switch {
			case r.err != nil || h.token == "":
			case i == 0:
				if g := add(writers, h, r.node); g.count > best.count {
					best = g
				}
			default:
				add(readers, h, r.node)
			}
		}
		// Decided when a writer holds a quorum (and its fence is certain,
		// see fenceChoice), or none can and which readers hold a quorum is
		// certain (with their fences), and, if none does, whether too many
		// failed to tell is certain.
		pending := len(c.nodes) - answers
		if waiting > 0 {
			return false
		}
		if best.count >= c.quorum {
			_, certain := best.fence.value(c.quorum)
			return certain || pending == 0
		}
		if best.count+pending >= c.quorum {
			return false
		}
		most, held := best.count, false
		for _, g := range readers {
			_, certain := g.fence.value(c.quorum)
			if g.count+pending >= c.quorum && (g.count < c.quorum || !certain) {
				return false
			}
			most, held = max(most, g.count), held || g.count >= c.quorum
		}
		return held || most+len(errs) >= c.quorum || most+len(errs)+pending < c.quorum
	})
	rd.stragglers(nil)
	if best.count >= c.quorum {
		best.info.HeldNodes = best.count
		best.info.Fence, _ = best.fence.value(c.quorum)
		best.info.Mode = ModeWrite
		return best.info, best.first, nil
	}
	// Readers: the one held longest speaks for them, with their greatest fence.
	most, n, first, fence := best.count, 0, -1, int64(0)
	var longest *group
	for _, g := range readers {
		most = max(most, g.count)
		if g.count < c.quorum {
			continue
		}
		f, _ := g.fence.value(c.quorum)
		n, fence = n+1, max(fence, f)
		if first < 0 || g.first < first {
			first = g.first
		}
		if longest == nil || g.info.Remaining > longest.info.Remaining {
			longest = g
		}
	}
	switch {
	case n > 0:
		info := longest.info
		info.Mode, info.Readers, info.Fence, info.HeldNodes = ModeRead, n, fence, longest.count
		return info, first, nil
	case most+len(errs) >= c.quorum:
		return Info{}, -1, unavailable(errs)
	}
	return Info{}, -1, ErrNotHeld
}

// holder is a token's record on a node, as inspect.lua reads it.
type holder struct {
	token       string
	pttl, fence int64
	committed   bool
	owner       string
}

// parseInspect parses inspect.lua's reply: the writer (token "" if none),
// then the readers.
func parseInspect(cmd *redis.Cmd) ([]holder, error) {
	v, err := cmd.Slice()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var hs []holder
	for i := 0; i+5 <= len(v); i += 5 {
		h := holder{pttl: toInt(v[i+1])}
		h.token, _ = v[i].(string)
		h.fence, h.committed, h.owner = recorded(v[i+2 : i+5])
		hs = append(hs, h)
	}
	return hs, nil
}

// Warm opens every node's connections and loads the scripts, in parallel,
// each node bounded by timeout, so that the first requests do not pay for
// dialling or a NOSCRIPT (and a restarted node's quarantine is known before
// them). Nodes that do not answer are tried again on every request.
func (c *Coordinator) Warm(ctx context.Context, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if n.client.Ping(ctx).Err() != nil {
				return
			}
			for _, s := range scripts {
				_ = s.Load(ctx, n.client).Err()
			}
			if n.pipe != nil {
				_ = n.pipe.Ping(ctx).Err()
			}
		})
	}
	wg.Wait()
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
