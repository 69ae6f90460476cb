package redlock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting acquires.
//
// A waiting Acquire joins a first-come-first-served queue per lock on this
// coordinator; only the head of the queue sends commands (of a semaphore's
// queue, the first limit waiters: one per permit). The head tries,
// and when the lock is held it sleeps until the first of:
//   - a release of that lock, announced by release.lua on a pub/sub channel
//     of every node (one subscription per node, not per lock or waiter); it
//     then waits for a quorum of nodes to report it, or 2ms, and tries again;
//   - the holder's remaining TTL, learned from the failed round, so that a
//     crashed holder's lock is taken as soon as it expires;
//   - a jittered fallback poll (Options.PollInterval), in case a message was
//     lost; a re-made subscription also wakes every head;
//   - the end of the wait or of ctx.
// When the head acquires the lock it leaves the queue and the next waiter
// tries at once: refused, its round asks the nodes to announce the release
// (release.lua publishes only for locks someone waits for).
//
// A lock on several resources (AcquireMulti) waits in the queue of each of
// them, and contends once it is a head of all (see join); the release of
// any of them wakes it.
//
// A semaphore's permit released on this coordinator while one of the
// semaphore's heads here waits idle (in pause) is handed over to the first
// such head in the same round (handOver): the permit is never free in
// between. A head that is making a round is not handed one, nor is a waiter
// behind the heads (it would be served before them); a release that finds
// no idle head is announced as above.

// counters are the coordinator's statistics, read by Stats.
type counters struct {
	attempts, acquired, held, split, unavailable atomic.Uint64
	waiting                                      atomic.Int64
}

// Stats is a snapshot of a coordinator's counters, for metrics.
type Stats struct {
	Waiting int64 // acquires waiting for a lock now
	// Attempts counts acquire rounds sent to the nodes; Acquired, Held and
	// Unavailable count their outcomes (held: another owner had a quorum).
	Attempts, Acquired, Held, Unavailable uint64
	// SplitVotes counts failed rounds that won some nodes while other owners
	// held fewer than a quorum: contention split the votes so that nobody
	// may have won.
	SplitVotes uint64
}

// Stats returns the coordinator's counters.
func (c *Coordinator) Stats() Stats {
	return Stats{
		Waiting:     c.stats.waiting.Load(),
		Attempts:    c.stats.attempts.Load(),
		Acquired:    c.stats.acquired.Load(),
		Held:        c.stats.held.Load(),
		Unavailable: c.stats.unavailable.Load(),
		SplitVotes:  c.stats.split.Load(),
	}
}

// fingerprint is how release messages name the releasing token without
// revealing it: the first 16 hex digits of its SHA-1.
func fingerprint(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// acquireWaiting is Acquire with a wait (see the comment at the top). Most
// waiters of a busy lock sit behind the head for a long time, with this frame
// on their stack: so it keeps few locals and leaves the rounds to contend.
func (c *Coordinator) acquireWaiting(ctx context.Context, a *attempt, wait time.Duration) (lock Lock, err error) {
	start := time.Now()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	if f := c.opts.OnWait; f != nil {
		defer func() { f(time.Since(start), err == nil) }()
	}

	if c.hub.waiting(a.lockKeys(), 0) {
		if lock, ok := a.retried(ctx); ok {
			return lock, nil
		}
	}
	heads := 1 // a lock's waiters contend one at a time; a semaphore's, one per permit
	if a.sem != nil {
		heads = a.sem.limit
	}
	w := c.hub.join(c, a, heads)
	c.stats.waiting.Add(1) // after join: Stats().Waiting counts queued waiters
	defer c.stats.waiting.Add(-1)
	defer c.hub.leave(w)
	a.waiting = true
	a.until = start.Add(wait)

	// Once a head, try at once, even when the previous head just took the
	// lock: a refused round asks the nodes to announce its release.
	got, err := c.queued(ctx, w, deadline)
	switch {
	case got != nil && got.err == nil:
		return c.handedOver(ctx, a, got)
	case err != nil:
		return Lock{}, err
	}
	return c.contend(ctx, a, w, deadline)
}

// handedOver returns the lock that a release handed over to a waiting
// acquire (see handOver), unless its caller went away meanwhile: then it
// gives the lock back, so that nobody holds it for its TTL, and returns
// ctx's error. A chosen token's lock stays: its caller may retry.
func (c *Coordinator) handedOver(ctx context.Context, a *attempt, got *handoff) (Lock, error) {
	if ctx.Err() == nil || a.chosen {
		return got.lock, nil
	}
	c.bg.Go(func() { _ = c.release(context.WithoutCancel(ctx), a.target(), got.lock.Token) })
	return Lock{}, errors.Join(&HeldError{}, ctx.Err())
}

// queued waits until w is a head, or its wait or ctx ends. A semaphore's
// waiter may be handed a permit meanwhile (see handOver): queued returns
// the outcome of a hand-over that succeeded, or that was under way when it
// stopped waiting.
func (c *Coordinator) queued(ctx context.Context, w *waiter, deadline *time.Timer) (got *handoff, err error) {
	c.hub.setPaused(w, true)
	defer func() {
		if c.hub.setPaused(w, false) && got == nil {
			h := <-w.offer
			got = &h
		}
	}()
	for {
		select {
		case <-w.head:
			return nil, nil
		case h := <-w.offer:
			if h.err == nil {
				return &h, nil
			}
			c.hub.setPaused(w, true) // failed: it may be claimed again
		case <-ctx.Done():
			return nil, errors.Join(&HeldError{}, ctx.Err())
		case <-deadline.C:
			return nil, &HeldError{}
		}
	}
}

// contend makes rounds for the head waiter w until it takes the lock or the
// wait ends, pausing between refused rounds.
func (c *Coordinator) contend(ctx context.Context, a *attempt, w *waiter, deadline *time.Timer) (lock Lock, err error) {
	var sleep time.Duration // before the next round; 0: at once
	var ranAt time.Time     // when the last round ended
	for {
		if sleep > 0 {
			done, got, werr := c.pause(ctx, w, sleep, deadline)
			if got != nil && got.err == nil {
				return c.handedOver(ctx, a, got)
			}
			if werr != nil {
				a.abandon(ctx)
				return Lock{}, errors.Join(err, werr)
			}
			if done {
				a.abandon(ctx)
				// The holder's remaining TTL as of now, not of the round.
				if he := (*HeldError)(nil); errors.As(err, &he) && he.Remaining > 0 {
					he.Remaining = max(he.Remaining-time.Since(ranAt), time.Millisecond)
				}
				return Lock{}, err
			}
		}
		w.drain()
		if p := w.freed.Swap(0); p > 0 {
			a.sem.freed(int(p) - 1)
		}
		lock, err = a.run(ctx)
		ranAt = time.Now()
		if err == nil {
			c.hub.held(a.lockKeys(), lock.Until, true)
			return lock, nil
		}
		if he := (*HeldError)(nil); errors.As(err, &he) && he.Remaining > 0 {
			c.hub.held(a.lockKeys(), ranAt.Add(he.Remaining), false)
		}
		if errors.Is(err, ErrLimitMismatch) { // waiting cannot change it
			a.abandon(ctx)
			return Lock{}, err
		}
		if ctx.Err() != nil {
			a.abandon(ctx)
			return Lock{}, errors.Join(err, ctx.Err())
		}
		sleep = jitter(c.opts.RetryDelay) // split votes, silent nodes
		if he := (*HeldError)(nil); errors.As(err, &he) {
			sleep = jitter(c.opts.PollInterval) // until a release, or the fallback poll
			if he.Remaining > 0 {
				sleep = min(sleep, he.Remaining+time.Millisecond)
			}
			if a.sem != nil && a.sem.again { // another permit is free
				sleep = jitter(c.opts.RetryDelay)
			}
		}
	}
}

// pause sleeps until a release of w's lock is announced by a quorum of nodes
// (or 2ms after the first announcement), or for d. It returns done when the
// wait is over, or ctx's error; and the outcome of a hand-over, if a release
// claimed w meanwhile (which it then waits for).
func (c *Coordinator) pause(ctx context.Context, w *waiter, d time.Duration, deadline *time.Timer) (done bool, got *handoff, err error) {
	c.hub.setPaused(w, true)
	defer func() {
		if c.hub.setPaused(w, false) && got == nil {
			h := <-w.offer
			got = &h
		}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	var seen uint64 // nodes that announced a release, as bits
	var gather <-chan time.Time
	for {
		select {
		case node := <-w.wake:
			if node < 0 { // subscription re-made: messages may be lost
				return false, nil, nil
			}
			seen |= 1 << node
			if bits.OnesCount64(seen) >= c.quorum {
				return false, nil, nil
			}
			if gather == nil {
				g := time.NewTimer(2 * time.Millisecond)
				defer g.Stop()
				gather = g.C
			}
		case <-gather:
			return false, nil, nil
		case h := <-w.offer:
			return false, &h, nil
		case <-t.C:
			return false, nil, nil
		case <-deadline.C:
			return true, nil, nil
		case <-ctx.Done():
			return false, nil, ctx.Err()
		}
	}
}

// waiter is one waiting Acquire in a queue, or in one queue per resource
// (AcquireMulti).
type waiter struct {
	keys []string // its queues' keys
	// behind is how many of its queues it is not a head of yet; it
	// contends once it is a head of all. Guarded by the hub's mu.
	behind int
	own    string        // fingerprint of its token: its own releases do not wake it
	wake   chan int      // node index per release announcement; -1: resubscribed
	head   chan struct{} // one value when it becomes the head
	// freed is 1 + the permit of a semaphore whose release woke it last.
	freed atomic.Int64
	// wokenBy is the fingerprint of the release that woke it last: the
	// other nodes' announcements of that release wake it too, not another
	// head of a semaphore. Guarded by the hub's mu.
	wokenBy string

	// A semaphore's head may be handed a permit by a release on this
	// coordinator (see handOver) while it waits idle (in pause, or just
	// made a head and not yet out of the queue's wait): a is its attempt,
	// paused says it waits idle,
	// claimed that a hand-over runs for it (both guarded by the hub's mu),
	// and offer brings that hand-over's outcome.
	a       *attempt
	paused  bool
	claimed bool
	offer   chan handoff
}

// handoff is the outcome of a hand-over for a waiter.
type handoff struct {
	lock Lock
	err  error
}

// drain drops stale wake-ups.
func (w *waiter) drain() {
	for {
		select {
		case <-w.wake:
		default:
			return
		}
	}
}

// waitHub holds the queues of waiters per lock key and the subscriptions
// that wake them. Its zero value is ready once start has run.
type waitHub struct {
	mu     sync.Mutex
	queues map[string]*queue
	subs   []*redis.PubSub
	closed bool
	wg     sync.WaitGroup
}

// queue is the waiters of one lock or semaphore, first come first served;
// the first heads of them are its heads, which contend.
type queue struct {
	ws    []*waiter
	heads int
	// freeAt is when the lock (a permit) is next free as its heads last
	// learned: the holder's remaining TTL from a refused round, or the end
	// of a head's own lock. The zero time when unknown.
	freeAt time.Time
}

// first returns the heads.
func (q *queue) first() []*waiter { return q.ws[:min(q.heads, len(q.ws))] }

// join appends a waiter for a's lock or semaphore to its queue (key
// a.keys[0]), or for a's resources to each one's queue, at once, so that
// two waiters that share queues are in the same order in each: the first
// of any waiters is a head of all its queues, and none waits for another
// in a cycle. A queue has heads heads (its first waiter sets it). The
// waiter is told at once if it is a head of all its queues.
func (h *waitHub) join(c *Coordinator, a *attempt, heads int) *waiter {
	w := &waiter{keys: a.lockKeys(), own: fingerprint(a.token), wake: make(chan int, 2*len(c.nodes)+1), head: make(chan struct{}, 1)}
	if a.sem != nil {
		w.a, w.offer = a, make(chan handoff, 1) // a release here may hand it a permit
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.queues == nil {
		h.queues = map[string]*queue{}
	}
	for _, key := range w.keys {
		q := h.queues[key]
		if q == nil {
			q = &queue{heads: heads}
			h.queues[key] = q
		}
		if len(q.ws) >= q.heads {
			w.behind++
		}
		q.ws = append(q.ws, w)
	}
	if w.behind == 0 {
		w.head <- struct{}{}
	}
	return w
}

// leave removes w from its queues. Where w was a head, the next waiter
// becomes one, and is told if it is a head of all its queues now.
func (h *waitHub) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, key := range w.keys {
		q := h.queues[key]
		i := slices.Index(q.ws, w)
		if i < 0 {
			continue
		}
		q.ws = slices.Delete(q.ws, i, i+1)
		if i < q.heads && len(q.ws) >= q.heads {
			next := q.ws[q.heads-1]
			if next.behind--; next.behind == 0 {
				next.head <- struct{}{}
			}
		}
		if len(q.ws) == 0 {
			delete(h.queues, key)
		}
	}
}

// setPaused marks w as waiting idle (in pause, or queued behind the heads)
// or not. A semaphore's waiter that waits idle may be claimed by a
// hand-over; marked busy, setPaused returns whether it was, and the caller
// must then receive its outcome from w.offer.
func (h *waitHub) setPaused(w *waiter, paused bool) (claimed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.paused = paused
	claimed, w.claimed = w.claimed, false
	return claimed
}

// claim returns a head of key that waits idle (not in a round), claimed for
// a hand-over from the release of from (a fingerprint), or nil: the first
// head that is a semaphore's and not from's own. A waiter behind the heads
// is never claimed, even while every head is in a round: it would be served
// before them, out of turn.
func (h *waitHub) claim(key, from string) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[key]
	if q == nil {
		return nil
	}
	for _, w := range q.first() {
		if w.a != nil && w.paused && !w.claimed && w.own != from {
			w.claimed = true
			return w
		}
	}
	return nil
}

// held notes that the lock of keys is held until at least until (see
// queue.freeAt): later for a lock a head took, the first expiry a refused
// round saw otherwise.
func (h *waitHub) held(keys []string, until time.Time, took bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		if q := h.queues[k]; q != nil && (!took || q.freeAt.Before(until)) {
			q.freeAt = until
		}
	}
}

// busyFor is how long the lock of keys stays held as its waiters here last
// learned (see queue.freeAt): the longest of keys'; 0 when unknown.
func (h *waitHub) busyFor(keys []string) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var d time.Duration
	for _, k := range keys {
		if q := h.queues[k]; q != nil {
			d = max(d, time.Until(q.freeAt))
		}
	}
	return d
}

// waiting reports whether more than n wait for one of keys.
func (h *waitHub) waiting(keys []string, n int) bool {
	return slices.ContainsFunc(keys, func(k string) bool { return h.waiters(k) > n })
}

// waiters is how many wait for key.
func (h *waitHub) waiters(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[key]; q != nil {
		return len(q.ws)
	}
	return 0
}

// notify wakes a head waiter of key, unless the release (from) was its own:
// the one this release woke already (another node's announcement of it),
// else the first head (of a semaphore, the first without a permit to try).
// The key of a semaphore's permit i, <prefix>#i, wakes a head of the
// semaphore's queue (<prefix>#) and tells it i.
func (h *waitHub) notify(key, from string, node int) {
	permit := -1
	if i := strings.LastIndexByte(key, '#'); i >= 0 {
		permit, _ = strconv.Atoi(key[i+1:])
		key = key[:i+1]
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[key]
	if q == nil {
		return
	}
	heads := q.first()
	i := slices.IndexFunc(heads, func(w *waiter) bool { return w.wokenBy == from })
	if i < 0 {
		i = slices.IndexFunc(heads, func(w *waiter) bool { return w.own != from && (q.heads == 1 || w.freed.Load() == 0) })
	}
	if i < 0 || heads[i].own == from {
		return
	}
	w := heads[i]
	w.wokenBy = from
	if permit >= 0 {
		w.freed.Store(int64(permit) + 1)
	}
	select {
	case w.wake <- node:
	default:
	}
}

// wakeAll wakes every head: a subscription was re-made, messages are lost.
func (h *waitHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range h.queues {
		for _, w := range q.first() {
			select {
			case w.wake <- -1:
			default:
			}
		}
	}
}

// start subscribes to the release channel on every node, in the
// background. New calls it once.
func (h *waitHub) start(c *Coordinator) {
	for _, n := range c.nodes {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			ps := n.client.Subscribe(context.Background(), c.released)
			h.mu.Lock()
			if h.closed {
				h.mu.Unlock()
				_ = ps.Close()
				return
			}
			h.subs = append(h.subs, ps)
			h.mu.Unlock()
			subscribed := h.confirm(c, n, ps)
			for m := range ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)) {
				switch m := m.(type) {
				case *redis.Message:
					if key, from, ok := strings.Cut(m.Payload, "|"); ok {
						h.notify(key, from, n.idx)
					}
				case *redis.Subscription:
					if m.Kind == "subscribe" {
						if subscribed++; subscribed > 1 {
							h.wakeAll()
						}
					}
				}
			}
		}()
	}
}

// confirm reads the first reply to n's subscription, within the node
// timeout, and returns 1 if it is the subscription's confirmation, else 0.
// A refusal (an ACL without SUBSCRIBE or the channel) is logged: go-redis
// would swallow it, and waiting acquires would be woken by no release.
func (h *waitHub) confirm(c *Coordinator, n *node, ps *redis.PubSub) int {
	m, err := ps.ReceiveTimeout(context.Background(), c.opts.NodeTimeout)
	if code := errCode(err); code != "" {
		c.opts.Logger.Warn().Str("node", n.addr).Str("error", n.describe(err)).Str("channel", c.released).
			Msg("redlock: the node refused the subscription to release announcements: a release wakes no waiting acquire, which tries again only when the holder's TTL ends or every poll interval; allow SUBSCRIBE on the channel (docs/safety.md)")
	}
	if s, ok := m.(*redis.Subscription); ok && s.Kind == "subscribe" {
		return 1
	}
	return 0
}

// close ends the subscriptions and waits for their goroutines.
func (h *waitHub) close() error {
	h.mu.Lock()
	h.closed = true
	subs := h.subs
	h.subs = nil
	h.mu.Unlock()
	var errs []error
	for _, ps := range subs {
		errs = append(errs, ps.Close())
	}
	h.wg.Wait()
	return errors.Join(errs...)
}
