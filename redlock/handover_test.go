// Hand-over of a released permit to a waiting acquire (docs/semaphores.md).

package redlock

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/redistest"
)

// cancelOnArg is a go-redis hook that calls cancel before sending a command
// (alone or in a pipeline) that has arg among its arguments, once armed.
type cancelOnArg struct {
	arg    string
	cancel context.CancelFunc
	armed  *atomic.Bool
}

func (h cancelOnArg) check(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if h.armed.Load() && slices.Contains(cmd.Args(), any(h.arg)) {
			h.cancel()
		}
	}
}

func (h cancelOnArg) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cancelOnArg) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.check(cmd); return next(ctx, cmd) }
}

func (h cancelOnArg) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.check(cmds...); return next(ctx, cmds) }
}

// TestHandOverCallerGone: a permit handed over by a release to a waiting
// acquire whose caller has just gone away (its context cancelled while the
// hand-over ran) is released again, not left held for its TTL by nobody,
// and the acquire fails with the context's error.
func TestHandOverCallerGone(t *testing.T) {
	waiterCtx, leave := context.WithCancel(context.Background())
	defer leave()
	hook := cancelOnArg{arg: "gone-waiter", cancel: leave, armed: new(atomic.Bool)}
	cl := newCluster(t, 3, Options{PollInterval: time.Minute, ClientHook: func(c *redis.Client) { c.AddHook(hook) }})
	c, ctx := cl.c, t.Context()
	held, err := c.AcquirePermit(ctx, "s", permitOpts(1, AcquireOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.AcquirePermit(waiterCtx, "s", permitOpts(1, AcquireOptions{Wait: 20 * time.Second, TTL: 20 * time.Second, Owner: "gone-waiter"}))
		errc <- err
	}()
	waitPaused(t, c, "s")
	hook.armed.Store(true) // the hand-over's script names the waiter's owner
	if err := c.ReleasePermit(ctx, "", "s", held.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the acquire of a caller gone during its hand-over: %v, want context.Canceled", err)
	}
	eventually(t, patience, "the permit handed to a caller gone freed", func() bool {
		info, err := c.InspectSemaphore(ctx, "", "s")
		return err == nil && len(info.Permits) == 0
	})
}

// waitPaused waits until one acquire waits for a permit of semaphore name, idle
// between its rounds.
func waitPaused(t *testing.T, c *Coordinator, name string) {
	t.Helper()
	waitPausedIn(t, c, c.semaphoreKeysOf("", name).queue(), 1)
}

// waitPausedLock waits until one acquire waits for the lock on resource,
// idle between its rounds.
func waitPausedLock(t *testing.T, c *Coordinator, resource string) {
	t.Helper()
	waitPausedIn(t, c, c.lockKeysOf("", resource).queue(), 1)
}

// waitPausedIn waits until n acquires wait in the queue key, its heads idle
// between their rounds.
func waitPausedIn(t *testing.T, c *Coordinator, key string, n int) {
	t.Helper()
	eventually(t, patience, "the heads paused between their rounds", func() bool {
		c.hub.mu.Lock()
		defer c.hub.mu.Unlock()
		q := c.hub.queues[key]
		return q != nil && len(q.ws) == n && !slices.ContainsFunc(q.first(), func(w *waiter) bool { return !w.paused })
	})
}

// announced counts, from now on, the release announcements of the lock on
// resource that cl's nodes publish (the nodes are shared with other tests:
// their announcements are left out).
func (cl *cluster) announced(t *testing.T, resource string) *announcements {
	t.Helper()
	return cl.announcedOf(t, cl.c.lockKeysOf("", resource).Lock+"|")
}

// announcements counts release announcements (see announcedOf).
type announcements struct {
	cl       *cluster
	n        atomic.Int64 // those received so far
	payloads chan string  // the first of them (see next)
}

// announcedOf counts, from now on, the release announcements whose payload
// starts with prefix (a lock key and "|", or a semaphore's permit prefix).
func (cl *cluster) announcedOf(t *testing.T, prefix string) *announcements {
	t.Helper()
	a := &announcements{cl: cl, payloads: make(chan string, 16)}
	for _, s := range cl.servers {
		sub := s.Client().Subscribe(t.Context(), cl.c.released)
		if _, err := sub.Receive(t.Context()); err != nil { // subscribed
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Close() })
		go func() {
			for m := range sub.Channel() {
				if strings.HasPrefix(m.Payload, prefix) {
					a.n.Add(1)
					select {
					case a.payloads <- m.Payload:
					default: // only the first few are kept
					}
				}
			}
		}()
	}
	return a
}

// next is the payload of the next announcement received (of the first few),
// waited for up to patience.
func (a *announcements) next(t *testing.T) string {
	t.Helper()
	select {
	case p := <-a.payloads:
		return p
	case <-time.After(patience):
		t.Fatal("no announcement")
		return ""
	}
}

// settled is the count once every command sent so far, in the background
// too, has its answer (see settle) and the messages published are
// delivered: only while no acquire of cl.c runs, since settle waits for
// its background work.
func (a *announcements) settled() int64 {
	a.cl.settle()
	time.Sleep(50 * time.Millisecond)
	return a.n.Load()
}

// waitFor starts an acquire of resource on c with o (a waiting one), which
// sends its lock to got once it has it (an empty Lock after an error).
func waitFor(t *testing.T, c *Coordinator, resource string, o AcquireOptions, got chan<- Lock) {
	go func() {
		l, err := c.Acquire(t.Context(), resource, o)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
}

// TestLockHandedOver: a writer's release on a coordinator where a writer
// waits idle gives it the lock in the release's round: its acquire returns
// with a greater fence, no release is announced, and the record of each
// node names it and remembers the release (a retry of which answers 204).
func TestLockHandedOver(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Minute})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	held, err := c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Lock, 1)
	waitFor(t, c, res, AcquireOptions{Wait: 20 * time.Second, TTL: 20 * time.Second}, got)
	waitPausedLock(t, c, res)
	announced, rounds := cl.announced(t, res), c.Stats().Attempts
	if err := c.Release(ctx, "", res, held.Token); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l.Fence <= held.Fence || l.Locked < 2 {
		t.Fatalf("handed over: %+v, want a fence above %d on a quorum", l, held.Fence)
	}
	if n := announced.settled(); n != 0 {
		t.Errorf("a hand-over published %d announcements", n)
	}
	for i, s := range cl.servers {
		if r := readRecord(t, s.Client(), "redlockd:lock:/"+res); r.holder != l.Token || r.rel != fingerprint(held.Token) {
			t.Errorf("node %d: record %+v, want %s holding, %s released", i, r, l.Token, fingerprint(held.Token))
		}
	}
	if err := c.Release(ctx, "", res, held.Token); err != nil {
		t.Errorf("a retried release of the handed-over lock: %v", err)
	}
	if n := c.Stats().Attempts - rounds; n != 1 {
		t.Errorf("%d acquire rounds after the release, want 1 (the hand-over's, which was the release's)", n)
	}
}

// TestLockHandOverOtherGateway: while a writer of another coordinator waits
// for the lock (it marked the record), a release is announced and not
// handed over to the waiter here: both compete, and one of them gets it.
func TestLockHandOverOtherGateway(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Minute})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	other := cl.gateway(t)
	held, err := c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Acquire returns at the quorum: the last node's grant may still be on
	// its way, and the other coordinator's waiter, on connections of its
	// own, could take that node first (then undo it when refused).
	if n := cl.holders(t, res, held.Token); n != len(cl.servers) {
		t.Fatalf("the lock held on %d of %d nodes, want all", n, len(cl.servers))
	}
	got := make(chan Lock, 2)
	for _, g := range []*Coordinator{other, c} {
		waitFor(t, g, res, AcquireOptions{Wait: 20 * time.Second, TTL: 2 * time.Second}, got)
		if g == other {
			eventually(t, patience, "the other gateway's waiter to mark the record", func() bool {
				return readRecord(t, cl.servers[0].Client(), "redlockd:lock:/"+res).flags == other.mark
			})
		}
	}
	waitPausedLock(t, c, res)
	announced := cl.announced(t, res)
	if err := c.Release(ctx, "", res, held.Token); err != nil {
		t.Fatal(err)
	}
	first := <-got
	// The other waiter still contends: await the announcement (settled
	// would wait for its background work while it may start more).
	eventually(t, patience, "the release announced", func() bool { return announced.n.Load() > 0 })
	if err := c.Release(ctx, "", res, first.Token); err != nil && !errors.Is(err, ErrLockExpired) {
		t.Fatal(err)
	}
	if err := other.Release(ctx, "", res, first.Token); err != nil && !errors.Is(err, ErrLockExpired) {
		t.Fatal(err)
	}
	<-got
}

// TestLockPausedHeadWaitEnds: a waiter that becomes the head behind a
// holder that took the lock marked as waited for pauses without a round
// (see TestLockHandOverChain); when its wait ends meanwhile it is refused
// with the holder's remaining TTL, never given an empty lock, and the
// holder's lock is intact.
func TestLockPausedHeadWaitEnds(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Minute})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	held, err := c.Acquire(ctx, res, AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Lock, 1)
	waitFor(t, c, res, AcquireOptions{Wait: 20 * time.Second, TTL: 20 * time.Second, Owner: "a"}, got)
	eventually(t, patience, "the first waiter to queue", func() bool { return c.Stats().Waiting == 1 })
	type outcome struct {
		lock Lock
		err  error
	}
	second := make(chan outcome, 1)
	go func() {
		l, err := c.Acquire(ctx, res, AcquireOptions{Wait: 500 * time.Millisecond, TTL: 20 * time.Second, Owner: "b"})
		second <- outcome{l, err}
	}()
	waitPausedIn(t, c, c.lockKeysOf("", res).queue(), 2)
	if err := c.Release(ctx, "", res, held.Token); err != nil { // handed to a, marked: b waits behind
		t.Fatal(err)
	}
	a := <-got
	b := <-second
	if he := (*HeldError)(nil); !errors.As(b.err, &he) || he.Remaining <= 0 || he.Remaining > 20*time.Second {
		t.Fatalf("the paused waiter whose wait ended: %+v, %v; want a HeldError with a's remaining TTL", b.lock, b.err)
	}
	if info, err := c.Inspect(ctx, "", res); err != nil || info.Owner != "a" || info.Fence != a.Fence {
		t.Fatalf("after it: %+v, %v; want a's lock", info, err)
	}
}

// TestLockHandOverChain: with writers queued on one coordinator, each
// release hands the lock to the next in the order they came, one round
// each (the hand-over), and none announced: a new head behind a holder
// that took the lock marked as waited for pauses instead of a round that
// would only be refused.
func TestLockHandOverChain(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Minute})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	held, err := c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	got := make(chan Lock, n)
	for i := range n {
		waitFor(t, c, res, AcquireOptions{Wait: 20 * time.Second, TTL: 20 * time.Second, Owner: strconv.Itoa(i)}, got)
		eventually(t, patience, "the waiter to queue", func() bool { return c.Stats().Waiting == int64(i+1) })
	}
	announced, rounds := cl.announced(t, res), c.Stats().Attempts
	for i := range n {
		waitPausedIn(t, c, c.lockKeysOf("", res).queue(), n-i) // else the release is announced
		if err := c.Release(ctx, "", res, held.Token); err != nil {
			t.Fatal(err)
		}
		held = <-got
		if held.Owner != strconv.Itoa(i) {
			t.Fatalf("hand-over %d went to waiter %s", i, held.Owner)
		}
	}
	if got, pubs := c.Stats().Attempts-rounds, announced.settled(); got != n || pubs != 0 {
		t.Errorf("%d hand-overs: %d rounds and %d announcements, want %d and none", n, got, pubs, n)
	}
}

// TestAnnouncementsNameTheFingerprint checks that a release announcement
// names the releasing token by its fingerprint, never the token, for a
// release and for the undo of an acquire's grants: the coordinator passes
// the fingerprint to the scripts, which never hash a token (prelude.lua).
// A waiter of another coordinator marks the lock, so that both are
// announced (no hand-over on the coordinator that releases).
func TestAnnouncementsNameTheFingerprint(t *testing.T) {
	cl := newCluster(t, 3, waitOpts)
	ctx := t.Context()
	other := cl.gateway(t)
	for _, how := range []string{"release", "undo"} {
		res := uniq(t)
		key := cl.c.lockKeysOf("", res).Lock
		l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			w, err := other.Acquire(ctx, res, AcquireOptions{Wait: 20 * time.Second})
			if err == nil {
				err = other.Release(ctx, "", res, w.Token)
			}
			got <- err
		}()
		eventually(t, patience, "the waiter to mark the lock", func() bool {
			return slices.ContainsFunc(cl.servers, func(s *redistest.Server) bool {
				r := readRecord(t, s.Client(), key)
				return r.holder == l.Token && r.flags != "-"
			})
		})
		announced := cl.announced(t, res)
		if how == "release" {
			err = cl.c.Release(ctx, "", res, l.Token)
		} else {
			var a *attempt
			if a, err = cl.c.newAttempt(res, AcquireOptions{Token: l.Token}); err == nil {
				a.undo(ctx, cl.c.idxs)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if m, want := announced.next(t), key+"|"+fingerprint(l.Token); m != want || strings.Contains(m, l.Token) {
			t.Errorf("%s announced %q, want %q", how, m, want)
		}
		if err := <-got; err != nil {
			t.Fatalf("%s: the waiter: %v", how, err)
		}
	}
}
