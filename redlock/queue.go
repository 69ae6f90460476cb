package redlock

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	// of a head's own lock. The zero time when unknown. marked: a head took
	// it with the nodes asked to announce its release (interest 2).
	freeAt time.Time
	marked bool
	// full: a semaphore's heads here last found every permit held (a
	// refused round that saw none free), and only hand-overs, which leave
	// as many held, took permits since.
	full bool
}

// first returns the heads.
func (q *queue) first() []*waiter { return q.ws[:min(q.heads, len(q.ws))] }

// join appends a waiter for a's lock or semaphore to its queue (key
// a.keys.queue()), or for a's resources to each one's queue, at once, so that
// two waiters that share queues are in the same order in each: the first
// of any waiters is a head of all its queues, and none waits for another
// in a cycle. A queue has heads heads (its first waiter sets it). The
// waiter is told at once if it is a head of all its queues.
func (h *waitHub) join(c *Coordinator, a *attempt, heads int) *waiter {
	w := &waiter{keys: a.kind.queues(), own: fingerprint(a.token), wake: make(chan int, 2*len(c.nodes)+1), head: make(chan struct{}, 1)}
	if a.kind.takesHandOver() {
		w.a, w.offer = a, make(chan handoff, 1) // a release here may hand it the lock
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
// head that takes hand-overs (see kind.takesHandOver) and is not from's
// own. A waiter behind the heads is never claimed, even while every head
// is in a round: it would be served before them, out of turn.
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
// queue.freeAt): later for a lock a head took (marked: it keeps the next
// heads out and its release is announced, see attempt.heldMarked), the
// first expiry a refused round saw otherwise (full: that round found every
// permit of a semaphore held).
func (h *waitHub) held(keys []string, until time.Time, took, marked, full bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		q := h.queues[k]
		switch {
		case q == nil:
		case took:
			if q.freeAt.Before(until) {
				q.freeAt = until
			}
			q.marked, q.full = marked, false
		default:
			q.freeAt, q.marked, q.full = until, false, full
		}
	}
}

// tookPermit notes that a head of the semaphores' queues keys took a
// permit (marked: its release is announced): handed over (known false: the
// permits held are as many as before, so a queue known full stays full), or
// by a round that tells whether it left every permit held (known, full). A
// queue so full and marked makes its next head pause (see heldMarked) until
// a release or the first expiry its heads learned.
func (h *waitHub) tookPermit(keys []string, marked, known, full bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		if q := h.queues[k]; q != nil {
			if known {
				q.full = full
			}
			q.marked = marked && q.full
		}
	}
}

// notFull forgets that the semaphores of keys are full (see queue.full).
func (h *waitHub) notFull(keys []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		if q := h.queues[k]; q != nil {
			q.full = false
		}
	}
}

// heldMarked is how long the lock of keys stays held by a head of this
// coordinator that took it marked (see held), or a semaphore stays full
// (see tookPermit): the shortest of keys'; 0 when one of them is not so
// held.
func (h *waitHub) heldMarked(keys []string) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := time.Duration(math.MaxInt64)
	for _, k := range keys {
		q := h.queues[k]
		if q == nil || !q.marked {
			return 0
		}
		d = min(d, time.Until(q.freeAt))
	}
	return max(d, 0)
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
