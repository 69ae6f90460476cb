package redlock

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/redlockd/redlockd/internal/valid"
)

// Locks on several resources (docs/several-resources.md): all or none. Each node takes every
// resource in one script (multi_acquire.lua), so a node grants all of them
// or none, and nobody holds some while waiting for others: no deadlock. A
// round's answers are counted per resource, as a lock's (each resource gets
// its own fence, by its own rules); the lock is held when every resource
// is. It is a writer's lock on each resource.

// MaxResources is the most resources one lock may take.
const MaxResources = valid.MaxResources

// MultiLock is a lock on several resources acquired or extended on a
// quorum of nodes: a Lock with Resources and one fence per resource
// (Fences[i] is Resources[i]'s, by that resource's rules; see Lock.Fence).
// Validity and Locked are the smallest over the resources.
type MultiLock struct {
	Namespace string
	Resources []string
	Token     string
	Fences    []int64
	Owner     string
	TTL       time.Duration
	Validity  time.Duration
	Start     time.Time
	Until     time.Time
	// Nodes is the number of nodes, Quorum the number needed, Locked the
	// number of nodes that hold every resource.
	Nodes, Quorum, Locked int
}

// multiLock makes the MultiLock of resources from each one's Lock.
func multiLock(resources []string, locks []Lock) MultiLock {
	l := locks[0]
	m := MultiLock{Namespace: l.Namespace, Resources: resources, Token: l.Token, Owner: l.Owner, TTL: l.TTL,
		Start: l.Start, Until: l.Until, Nodes: l.Nodes, Quorum: l.Quorum, Locked: l.Locked}
	for _, l := range locks {
		m.Fences = append(m.Fences, l.Fence)
		m.Start, m.Locked = minTime(m.Start, l.Start), min(m.Locked, l.Locked)
		m.Until = minTime(m.Until, l.Until)
	}
	m.Validity = m.Until.Sub(m.Start)
	return m
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// checkResources checks the names of a lock on several resources and the
// tokens given: 1 to MaxResources resources, each once.
func (c *Coordinator) checkResources(namespace string, resources []string, tokens ...string) error {
	if problem := valid.Resources(resources); problem != "" {
		return invalid("%s", problem)
	}
	return c.checkName(namespace, resources[0], tokens...)
}

// AcquireMulti takes the lock on every one of resources, or on none, as
// Acquire takes one writer's lock (o.Mode must be ModeWrite or empty):
// waiting, idempotent token, same errors. It conflicts with any lock, a
// reader's or a writer's, on one of the resources. A waiting AcquireMulti
// is woken by the release of any of them.
func (c *Coordinator) AcquireMulti(ctx context.Context, resources []string, o AcquireOptions) (MultiLock, error) {
	if o.Mode == ModeRead {
		return MultiLock{}, invalid("a lock on several resources is a writer's: mode must be write")
	}
	if err := c.checkResources(o.Namespace, resources); err != nil {
		return MultiLock{}, err
	}
	a, err := c.newAttempt(resources[0], o)
	if err != nil {
		return MultiLock{}, err
	}
	m := &multiKind{}
	for _, r := range resources {
		k := c.lockKeysOf(a.ns, r)
		m.keys = append(m.keys, k)
		m.parts = append(m.parts, &attempt{c: c, ns: a.ns, resource: r, kind: writerKind{lockKind{k: k}},
			token: a.token, chosen: a.chosen, ttl: a.ttl, owner: a.owner})
	}
	a.resource, a.kind = "", m
	if o.Wait == 0 {
		_, err = c.acquireOnce(ctx, a)
	} else {
		_, err = c.acquireWaiting(ctx, a, o.Wait)
	}
	if err != nil {
		return MultiLock{}, err
	}
	return multiLock(resources, m.locks), nil
}

// scriptMulti is acquire.lua on several resources, all or nothing.
var scriptMulti = script("multi_acquire.lua", "acquire.lua")

// multiKind is a writer's lock on several resources (AcquireMulti): one
// attempt per resource (parts: a writer's lock each, with the attempt's
// token, keys[i] its keys), whose rounds are one script on every node;
// locks are those of the round that succeeded.
type multiKind struct {
	oneLock
	keys  []lockKeys
	parts []*attempt
	locks []Lock
}

func (*multiKind) mode() Mode { return ModeWrite }

// round runs multi_acquire.lua on every node, whose answer is split per
// resource and counted by one acqTally per resource. Every node grants all
// or none, so the tallies count the same votes; each resource's fence is
// chosen, written back and finished as a lock's. It succeeds when every
// resource does, and else undoes every resource.
func (m *multiKind) round(ctx context.Context, a *attempt) (Lock, error) {
	c := a.c
	start := time.Now()
	ts := make([]*acqTally, len(m.parts))
	var keys []string
	for i, p := range m.parts {
		ts[i] = &acqTally{votes: votes{n: len(c.nodes), q: c.quorum}, a: p, tg: lockTarget{m.keys[i]}, minFence: math.MaxInt64}
		keys = append(keys, m.keys[i].acquire()...)
	}
	_, rd := runScript(ctx, c, c.idxs, scriptMulti, keys, a.args(), parseMulti(len(ts)), func(r reply[[]acqReply]) bool {
		decided := true
		for i, t := range ts {
			decided = t.add(part(r, i)) && decided
		}
		return decided
	})
	locks, oks := make([]Lock, len(ts)), make([]bool, len(ts))
	if ts[0].yes >= c.quorum { // the same votes for every resource
		c.each(len(ts), func(i int) { locks[i], oks[i] = m.parts[i].granted(ctx, start, ts[i]) })
	}
	var err error
	if slices.Contains(oks, false) {
		err = a.failed(ctx, ts)
	} else {
		c.obs.Decided(ctx, Decision{Outcome: OutcomeAcquired, Round: true})
		m.locks = locks
	}
	rd.stragglers(func(late []reply[[]acqReply], silent []int) {
		var undo []int // the same nodes for every resource: a node answers for all
		for i, t := range ts {
			rs := make([]reply[acqReply], len(late))
			for j, r := range late {
				rs[j] = part(r, i)
			}
			undo = t.a.writeBack(err == nil, locks[i].Fence, t, rs, silent)
		}
		if err != nil && !a.chosen {
			a.cleanup(context.Background(), append(undo, silent...))
		}
		if err != nil {
			a.rejoined()
		}
	})
	return locks[0], err
}

// retried re-acquires every resource, as an extend of each does.
func (m *multiKind) retried(ctx context.Context, a *attempt) (Lock, bool) {
	locks, errs := make([]Lock, len(m.parts)), make([]error, len(m.parts))
	a.c.each(len(m.parts), func(i int) {
		p, err := a.c.extend(ctx, lockTarget{m.keys[i]}, a.ns, m.parts[i].resource, a.token, a.ttl)
		locks[i], errs[i] = p.Lock, err
	})
	if multiErr(errs) != nil {
		return Lock{}, false
	}
	m.locks = locks
	return locks[0], true
}

func (m *multiKind) undo(ctx context.Context, _ *attempt, idxs []int) {
	m.parts[0].c.each(len(m.parts), func(i int) { m.parts[i].undo(ctx, idxs) })
}

func (m *multiKind) release(ctx context.Context, a *attempt, token string) error {
	errs := make([]error, len(m.parts))
	a.c.each(len(m.parts), func(i int) { errs[i] = a.c.release(ctx, lockTarget{m.keys[i]}, token) })
	return multiErr(errs)
}

// queues: it waits in the queue of each resource, and is woken by the
// release of any of them.
func (m *multiKind) queues() []string {
	ks := make([]string, len(m.keys))
	for i, k := range m.keys {
		ks[i] = k.queue()
	}
	return ks
}

// wwaits: a waiting lock on several resources keeps new readers out of
// each.
func (m *multiKind) wwaits() []string {
	ks := make([]string, len(m.keys))
	for i, k := range m.keys {
		ks[i] = k.wwait()
	}
	return ks
}

// part is resource i's answer in a node's answer to multi_acquire.lua.
func part(r reply[[]acqReply], i int) reply[acqReply] {
	p := reply[acqReply]{node: r.node, err: r.err, silent: r.silent}
	if r.err == nil {
		p.val = r.val[i]
	}
	return p
}

// ExtendMulti extends a lock on several resources (DefaultTTL when ttl is
// 0), as Extend extends each: it succeeds when the token holds every
// resource on a quorum, and keeps the fences. May return Extend's errors.
func (c *Coordinator) ExtendMulti(ctx context.Context, namespace string, resources []string, token string, ttl time.Duration) (MultiLock, error) {
	if err := c.checkResources(namespace, resources, token); err != nil {
		return MultiLock{}, err
	}
	if _, err := c.ttlOrDefault(ttl); err != nil {
		return MultiLock{}, err
	}
	locks, errs := make([]Lock, len(resources)), make([]error, len(resources))
	c.each(len(resources), func(i int) { locks[i], errs[i] = c.Extend(ctx, namespace, resources[i], token, ttl) })
	if err := multiErr(errs); err != nil {
		return MultiLock{}, err
	}
	return multiLock(resources, locks), nil
}

// ReleaseMulti releases a lock on several resources, as Release releases
// each (idempotent too): it succeeds when the token held every resource on
// a quorum. May return Release's errors.
func (c *Coordinator) ReleaseMulti(ctx context.Context, namespace string, resources []string, token string) error {
	if err := c.checkResources(namespace, resources, token); err != nil {
		return err
	}
	errs := make([]error, len(resources))
	c.each(len(resources), func(i int) { errs[i] = c.Release(ctx, namespace, resources[i], token) })
	return multiErr(errs)
}

// each runs f(0), …, f(n-1) at once: one round per resource of a lock on
// several, which share round trips in the nodes' pipelines.
func (c *Coordinator) each(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

// multiErr is the error of an operation on several resources, from each
// one's: nil if none failed, else the first that says the quorum was
// unavailable (the outcome is unknown), else the first ErrHeldByOther
// (another token holds one of them, which ErrLockExpired would deny), else
// the first.
func multiErr(errs []error) error {
	for _, target := range []error{ErrQuorumUnavailable, ErrHeldByOther} {
		if i := slices.IndexFunc(errs, func(err error) bool { return errors.Is(err, target) }); i >= 0 {
			return errs[i]
		}
	}
	if i := slices.IndexFunc(errs, func(err error) bool { return err != nil }); i >= 0 {
		return errs[i]
	}
	return nil
}
