package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func permitOpts(limit int, o AcquireOptions) PermitOptions {
	return PermitOptions{AcquireOptions: o, Limit: limit}
}

// TestSemaphore: at most limit holders, each on its own permit, fences
// increasing across permits; a full semaphore refuses, a release frees a
// permit, release and extend by token alone, inspect without tokens.
func TestSemaphore(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	c, ctx := cl.c, t.Context()
	var held []Permit
	var last int64
	for i := range 3 {
		p, err := c.AcquirePermit(ctx, "sem", permitOpts(3, AcquireOptions{Owner: "w"}))
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if p.Fence <= last || p.Limit != 3 || p.Index < 0 || p.Index > 2 || p.Resource != "sem" {
			t.Fatalf("acquire %d: %+v after fence %d", i, p, last)
		}
		last = p.Fence
		held = append(held, p)
	}
	idx := []int{held[0].Index, held[1].Index, held[2].Index}
	slices.Sort(idx)
	if !slices.Equal(idx, []int{0, 1, 2}) {
		t.Fatalf("permits %v, want 0, 1 and 2", idx)
	}
	var he *HeldError
	if _, err := c.AcquirePermit(ctx, "sem", permitOpts(3, AcquireOptions{})); !errors.As(err, &he) {
		t.Fatalf("a fourth holder: %v, want ErrLockHeld", err)
	}
	info, err := c.InspectSemaphore(ctx, "", "sem")
	if err != nil || info.Limit != 3 || len(info.Permits) != 3 || info.Permits[0].Owner != "w" || info.Permits[2].HeldNodes < 3 {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
	ext, err := c.ExtendPermit(ctx, "", "sem", held[1].Token, 10*time.Second)
	if err != nil || ext.Index != held[1].Index || ext.Fence != held[1].Fence || ext.Limit != 3 || ext.TTL != 10*time.Second {
		t.Fatalf("extend: %+v, %v; held %+v", ext, err, held[1])
	}
	if err := c.ReleasePermit(ctx, "", "sem", held[1].Token); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := c.ReleasePermit(ctx, "", "sem", held[1].Token); err != nil {
		t.Fatalf("release again: %v", err)
	}
	if _, err := c.ExtendPermit(ctx, "", "sem", held[1].Token, 0); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("extend after release: %v, want ErrLockExpired", err)
	}
	if err := c.ReleasePermit(ctx, "", "sem", NewToken()); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("release with a stranger's token: %v, want ErrLockExpired", err)
	}
	// The free permit is found at once, whatever permit the first round asked for.
	p, err := c.AcquirePermit(ctx, "sem", permitOpts(3, AcquireOptions{}))
	if err != nil || p.Index != held[1].Index || p.Fence <= last {
		t.Fatalf("acquire after a release: %+v, %v; want permit %d, fence over %d", p, err, held[1].Index, last)
	}
	// A lock of the same name is another thing.
	if _, err := c.Acquire(ctx, "sem", AcquireOptions{}); err != nil {
		t.Fatalf("lock named as the semaphore: %v", err)
	}
}

func TestSemaphoreLimitMismatch(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	c, ctx := cl.c, t.Context()
	p, err := c.AcquirePermit(ctx, "s", permitOpts(2, AcquireOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	var le *LimitError
	if _, err := c.AcquirePermit(ctx, "s", permitOpts(3, AcquireOptions{Wait: time.Second})); !errors.As(err, &le) || le.Limit != 2 {
		t.Fatalf("another limit: %v, want a LimitError of 2", err)
	}
	if _, err := c.AcquirePermit(ctx, "s", permitOpts(2, AcquireOptions{Token: p.Token})); err != nil {
		t.Fatalf("the same token and limit again: %v", err)
	}
	if err := c.ReleasePermit(ctx, "", "s", p.Token); err != nil {
		t.Fatal(err)
	}
	// Nobody holds a permit: any limit goes.
	if q, err := c.AcquirePermit(ctx, "s", permitOpts(3, AcquireOptions{})); err != nil || q.Limit != 3 {
		t.Fatalf("another limit once every permit is free: %+v, %v", q, err)
	}
	for _, limit := range []int{0, -1, MaxLimit + 1} {
		if _, err := c.AcquirePermit(ctx, "s", permitOpts(limit, AcquireOptions{})); !errors.Is(err, ErrInvalid) {
			t.Errorf("limit %d: %v, want ErrInvalid", limit, err)
		}
	}
}

// TestSemaphoreIdempotent: a client token acquires again the permit it holds,
// with its fence.
func TestSemaphoreIdempotent(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	c, ctx := cl.c, t.Context()
	tok := NewToken()
	first, err := c.AcquirePermit(ctx, "s", permitOpts(4, AcquireOptions{Token: tok}))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		again, err := c.AcquirePermit(ctx, "s", permitOpts(4, AcquireOptions{Token: tok}))
		if err != nil || again.Index != first.Index || again.Fence != first.Fence {
			t.Fatalf("again: %+v, %v; first %+v", again, err, first)
		}
	}
	info, err := c.InspectSemaphore(ctx, "", "s")
	if err != nil || len(info.Permits) != 1 {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
}

// TestSemaphoreWaiting: waiters are served first come, first served, each
// woken by a release of any permit.
func TestSemaphoreWaiting(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Minute}) // no fallback poll: only wake-ups
	c, ctx := cl.c, t.Context()
	a, err := c.AcquirePermit(ctx, "s", permitOpts(2, AcquireOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AcquirePermit(ctx, "s", permitOpts(2, AcquireOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Permit, 2)
	for i := range 2 {
		go func() {
			p, err := c.AcquirePermit(context.Background(), "s", permitOpts(2, AcquireOptions{Wait: 20 * time.Second, Owner: string(rune('x' + i))}))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			got <- p
		}()
		eventually(t, patience, "the waiter to queue", func() bool { return c.Stats().Waiting == int64(i+1) })
	}
	start := time.Now()
	if err := c.ReleasePermit(ctx, "", "s", b.Token); err != nil {
		t.Fatal(err)
	}
	first := <-got
	if first.Owner != "x" || first.Index != b.Index {
		t.Fatalf("first served %+v, want waiter x on permit %d", first, b.Index)
	}
	if err := c.ReleasePermit(ctx, "", "s", a.Token); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second.Owner != "y" || second.Index != a.Index || second.Fence <= first.Fence {
		t.Fatalf("second served %+v after %+v", second, first)
	}
	if d := time.Since(start); d > patience {
		t.Fatalf("served after %v: woken by the fallback poll, not by the releases", d)
	}
}

// TestSemaphoreNodesDown: a minority of nodes down changes nothing; a
// majority down is unavailable, not "full".
func TestSemaphoreNodesDown(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	c, ctx := cl.c, t.Context()
	cl.setDown(0b00011)
	var held []Permit
	for range 2 {
		p, err := c.AcquirePermit(ctx, "s", permitOpts(2, AcquireOptions{}))
		if err != nil {
			t.Fatalf("acquire with 2 of 5 down: %v", err)
		}
		held = append(held, p)
	}
	if _, err := c.AcquirePermit(ctx, "s", permitOpts(2, AcquireOptions{})); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("a third holder with 2 of 5 down: %v, want ErrLockHeld", err)
	}
	if _, err := c.ExtendPermit(ctx, "", "s", held[0].Token, 0); err != nil {
		t.Fatalf("extend with 2 of 5 down: %v", err)
	}
	cl.setDown(0b00111)
	if _, err := c.AcquirePermit(ctx, "s", permitOpts(2, AcquireOptions{})); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("acquire with 3 of 5 down: %v, want ErrQuorumUnavailable", err)
	}
	if _, err := c.InspectSemaphore(ctx, "", "s"); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("inspect with 3 of 5 down: %v, want ErrQuorumUnavailable", err)
	}
	cl.setDown(0)
	// The nodes that were down come back without the permits: extend puts
	// them back (reassert), as for a lock.
	if _, err := c.ExtendPermit(ctx, "", "s", held[1].Token, 0); err != nil {
		t.Fatalf("extend with every node up: %v", err)
	}
	if err := c.ReleasePermit(ctx, "", "s", held[0].Token); err != nil {
		t.Fatalf("release: %v", err)
	}
	info, err := c.InspectSemaphore(ctx, "", "s")
	if err != nil || len(info.Permits) != 1 || info.Permits[0].Index != held[1].Index {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
}

// TestSemaphoreSplitPermits: holders left on a minority of nodes (stale keys
// of permits) neither fill the semaphore nor block the permits they hold.
func TestSemaphoreSplitPermits(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	c, ctx := cl.c, t.Context()
	// Permits 0 and 1 of 3 are held by strangers on 2 nodes each.
	for i := range 2 {
		for p := range 2 {
			putPermit(t, cl, "s", NewToken(), Permit{Index: p, Limit: 3}, i)
		}
	}
	for i := range 3 {
		p, err := c.AcquirePermit(ctx, "s", permitOpts(3, AcquireOptions{}))
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if err := c.ReleasePermit(ctx, "", "s", p.Token); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSemaphoreHeads: the first limit waiters contend at once, one per
// permit, so releases of several permits serve as many waiters together;
// the waiter behind them moves up when one is served.
func TestSemaphoreHeads(t *testing.T) {
	cl := newCluster(t, 5, Options{PollInterval: time.Minute}) // no fallback poll: only wake-ups
	c, ctx := cl.c, t.Context()
	var held []Permit
	for range 3 {
		p, err := c.AcquirePermit(ctx, "s", permitOpts(3, AcquireOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	got := make(chan Permit, 4)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // the fourth waiter gives up
	for i := range 4 {
		wg.Go(func() {
			p, err := c.AcquirePermit(wctx, "s", permitOpts(3, AcquireOptions{Wait: 20 * time.Second, TTL: 20 * time.Second}))
			if err != nil {
				if wctx.Err() == nil {
					t.Errorf("waiter %d: %v", i, err)
				}
				return
			}
			got <- p
		})
		eventually(t, patience, "the waiter to queue", func() bool { return c.Stats().Waiting == int64(i+1) })
	}
	start := time.Now()
	for _, p := range held {
		if err := c.ReleasePermit(ctx, "", "s", p.Token); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int]bool{}
	for range 3 {
		p := <-got
		if seen[p.Index] {
			t.Fatalf("permit %d granted twice", p.Index)
		}
		seen[p.Index] = true
	}
	if d := time.Since(start); d > patience {
		t.Fatalf("3 waiters served after %v: woken by the fallback poll, not by the releases", d)
	}
	if n := c.Stats().Waiting; n != 1 {
		t.Fatalf("%d waiting, want the fourth", n)
	}
	select {
	case p := <-got:
		t.Fatalf("a fourth holder of a semaphore of limit 3: %+v", p)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestSemaphoreHandOver: a release on the coordinator where an acquire
// waits hands the permit over in the same round: when ReleasePermit
// returns, the waiter holds the permit on a quorum already, with a greater
// fence, and a retried release is still told it worked.
func TestSemaphoreHandOver(t *testing.T) {
	cl := newCluster(t, 5, Options{PollInterval: time.Minute})
	c, ctx := cl.c, t.Context()
	held, err := c.AcquirePermit(ctx, "s", permitOpts(1, AcquireOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Permit, 1)
	go func() {
		p, err := c.AcquirePermit(context.Background(), "s", permitOpts(1, AcquireOptions{Wait: 20 * time.Second, Owner: "waiter"}))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- p
	}()
	// The waiter pauses after its first refused round.
	waitPaused(t, c, "s")
	if err := c.ReleasePermit(ctx, "", "s", held.Token); err != nil {
		t.Fatal(err)
	}
	info, err := c.InspectSemaphore(ctx, "", "s")
	if err != nil || len(info.Permits) != 1 || info.Permits[0].Owner != "waiter" || info.Permits[0].Fence <= held.Fence {
		t.Fatalf("just after the release: %+v, %v; want the waiter holding with a fence over %d", info, err, held.Fence)
	}
	p := <-got
	if p.Owner != "waiter" || p.Index != 0 || p.Fence <= held.Fence || p.Validity <= 0 {
		t.Fatalf("waiter got %+v", p)
	}
	if err := c.ReleasePermit(ctx, "", "s", held.Token); err != nil {
		t.Fatalf("the release retried: %v", err)
	}
	if err := c.ReleasePermit(ctx, "", "s", p.Token); err != nil {
		t.Fatalf("the waiter's release: %v", err)
	}
}

// TestSemaphoreHandOverChain: on a full semaphore, each release on the
// coordinator where acquires wait hands its permit to the first idle head,
// in the order they came, one round each (the hand-over) and none announced:
// a hand-over leaves as many permits held, so the waiter that becomes a head
// behind it pauses instead of sending a round that would only be refused
// (docs/semaphores.md, Waiting). The permit handed over is marked as waited
// for while others wait behind it.
func TestSemaphoreHandOverChain(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Minute})
	c, ctx := cl.c, t.Context()
	const limit, n = 2, 6
	held, got := fullWithWaiters(t, c, c, limit, n)
	queue := c.semaphoreKeysOf("", "s").queue()
	announced, rounds := cl.announcedOf(t, c.semaphoreKeysOf("", "s").Permit.Lock), c.Stats().Attempts
	for i := range n {
		waitPausedIn(t, c, queue, n-i) // else the release is announced
		if err := c.ReleasePermit(ctx, "", "s", held[0].Token); err != nil {
			t.Fatal(err)
		}
		p := <-got
		if p.Owner != strconv.Itoa(i) {
			t.Fatalf("hand-over %d went to waiter %s", i, p.Owner)
		}
		// Marked while others wait behind it here, as a round's grant: its
		// release is announced, wherever it is released.
		want := c.mark
		if i == n-1 {
			want = "-"
		}
		cl.settle() // node 0 may answer after the quorum: its record is read once it has
		if r := readRecord(t, cl.servers[0].Client(), fmt.Sprintf("redlockd:lock:/s#%d", p.Index)); r.flags != want {
			t.Errorf("hand-over %d: the permit's record is marked %q, want %q", i, r.flags, want)
		}
		held = append(held[1:], p)
	}
	if got, pubs := c.Stats().Attempts-rounds, announced.settled(); got != n || pubs != 0 {
		t.Errorf("%d hand-overs: %d rounds and %d announcements, want %d and none", n, got, pubs, n)
	}
}

// TestSemaphoreRoundFillsPauses: a head that takes the last free permit
// of a semaphore by a round (released on another gateway, so not handed
// over) makes the next head pause, as a hand-over does (see
// TestSemaphoreHandOverChain), instead of a round that would only be
// refused; that head then takes the next permit released.
func TestSemaphoreRoundFillsPauses(t *testing.T) {
	// One node: each release is announced once, so no late announcement of
	// a release already taken wakes another head for a round of its own.
	cl := newCluster(t, 1, Options{PollInterval: time.Minute})
	c, ctx := cl.c, t.Context()
	other := cl.gateway(t)
	const limit, n = 2, 3
	held, got := fullWithWaiters(t, c, other, limit, n)
	queue := c.semaphoreKeysOf("", "s").queue()
	rounds := c.Stats().Attempts
	if err := other.ReleasePermit(ctx, "", "s", held[0].Token); err != nil { // announced
		t.Fatal(err)
	}
	first := <-got
	if d := c.hub.heldMarked([]string{queue}); d < 10*time.Second { // the permits expire in 20s
		t.Errorf("the semaphore full again by a round: the next head pauses for %v, want until a release or the first expiry", d)
	}
	waitPausedIn(t, c, queue, n-1)
	if err := other.ReleasePermit(ctx, "", "s", held[1].Token); err != nil { // announced
		t.Fatal(err)
	}
	second := <-got
	if err := c.ReleasePermit(ctx, "", "s", first.Token); err != nil { // handed over
		t.Fatal(err)
	}
	third := <-got
	if r := c.Stats().Attempts - rounds; r != 3 {
		t.Errorf("2 permits released on another gateway, 1 here: %d rounds and hand-overs, want 3 (none refused)", r)
	}
	if owners := []string{first.Owner, second.Owner, third.Owner}; !slices.Equal(slices.Sorted(slices.Values(owners)), []string{"0", "1", "2"}) {
		t.Errorf("the waiters' permits went to %v, want one each", owners)
	}
}

// fullWithWaiters fills semaphore "s" of limit through holder, with 20s
// permits (held), then queues n waiters on c, owned "0" to "n-1" in order,
// whose permits got brings; it returns once every head paused, its refused
// round having found every permit held.
func fullWithWaiters(t *testing.T, c, holder *Coordinator, limit, n int) (held []Permit, got chan Permit) {
	t.Helper()
	for range limit {
		p, err := holder.AcquirePermit(t.Context(), "s", permitOpts(limit, AcquireOptions{TTL: 20 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	got = make(chan Permit, n)
	for i := range n {
		go func() {
			p, err := c.AcquirePermit(t.Context(), "s", permitOpts(limit, AcquireOptions{Wait: 20 * time.Second, TTL: 20 * time.Second, Owner: strconv.Itoa(i)}))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			got <- p
		}()
		eventually(t, patience, "the waiter to queue", func() bool { return c.Stats().Waiting == int64(i+1) })
	}
	waitPausedIn(t, c, c.semaphoreKeysOf("", "s").queue(), n)
	return held, got
}

// TestSemaphoreHandOverUndoesLeftover: a permit handed over to a waiter that
// holds another permit on a node, left by its failed rounds, replaces that
// one there (undone, so free there as elsewhere): the waiter holds the permit
// handed over on every node, not on all but that one, where the permit it
// leaves would stay held by nobody's lock (see permit_handover.lua).
func TestSemaphoreHandOverUndoesLeftover(t *testing.T) {
	cl := newCluster(t, 5, Options{PollInterval: time.Minute})
	c, ctx := cl.c, t.Context()
	releaser, stranger := NewToken(), NewToken()
	putPermit(t, cl, "s", releaser, Permit{Index: 0, Limit: 2}, 0, 1, 2, 3, 4)
	putPermit(t, cl, "s", stranger, Permit{Index: 1, Limit: 2}, 0, 1, 2, 3) // permit 1 free on node 4
	got := waitingPermit(t, c, 2)
	waitRefused(t, c)
	// Its round took permit 1 on node 4 if it asked for it; else it is put there.
	waiter := waiterToken(c, "s")
	putPermit(t, cl, "s", waiter, Permit{Index: 1, Limit: 2}, 4)
	// The undo of permit 1 is announced where someone waits: on node 4 too
	// (its round may have taken permit 1 there, rather than been refused).
	if err := cl.servers[4].Client().Set(ctx, c.semaphoreKeysOf("", "s").Waiting, "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	announced := cl.announcedOf(t, "redlockd:lock:/s#1|")
	if err := c.ReleasePermit(ctx, "", "s", releaser); err != nil {
		t.Fatal(err)
	}
	heldEverywhere(t, cl, <-got)
	if h := holderAt(t, cl.servers[4].Client(), "redlockd:lock:/s#1"); h != "" {
		t.Errorf("node 4: permit 1 still held by %q", h)
	}
	// The undo is announced as a release, naming the waiter by its fingerprint.
	if m, want := announced.next(t), "redlockd:lock:/s#1|"+fingerprint(waiter); m != want {
		t.Errorf("node 4 announced %q, want %q", m, want)
	}
}

// TestSemaphoreHandOverFillsGap: a permit handed over is put on the nodes
// where the releasing token held none, if it is free there (its holder's
// release landed there after a try took it on a quorum): else each later
// release of it would leave it free on those nodes only, where every try
// sees a permit free that no round can take (see Coordinator.handOver).
func TestSemaphoreHandOverFillsGap(t *testing.T) {
	cl := newCluster(t, 5, Options{PollInterval: time.Minute})
	c, ctx := cl.c, t.Context()
	releaser, stranger, gone := NewToken(), NewToken(), NewToken()
	putPermit(t, cl, "s", releaser, Permit{Index: 0, Limit: 2}, 0, 1, 2, 3)
	putPermit(t, cl, "s", stranger, Permit{Index: 1, Limit: 2}, 0, 1, 2, 3, 4)
	putPermit(t, cl, "s", gone, Permit{Index: 0, Limit: 2}, 4)
	got := waitingPermit(t, c, 2)
	waitRefused(t, c) // every permit held on every node
	// Permit 0 leaves node 4 without an announcement that would wake the
	// waiter (as a release that lands there late, after a try took it).
	if err := cl.servers[4].Client().Del(ctx, "redlockd:lock:/s#0").Err(); err != nil {
		t.Fatal(err)
	}
	// Node 4's answer comes first (the others' commands are held back for a
	// quarter of the node timeout): the hand-over counts it before it is
	// decided.
	for _, h := range cl.hooks[:4] {
		h.delay.Store(int64(testNodeTimeout / 4))
	}
	if err := c.ReleasePermit(ctx, "", "s", releaser); err != nil {
		t.Fatal(err)
	}
	p := <-got
	for _, h := range cl.hooks {
		h.delay.Store(0)
	}
	heldEverywhere(t, cl, p)
}

// heldEverywhere checks that p is the waiter's permit 0 of semaphore "s",
// held on every node once the commands sent so far have their answers.
func heldEverywhere(t *testing.T, cl *cluster, p Permit) {
	t.Helper()
	if p.Owner != "waiter" || p.Index != 0 {
		t.Fatalf("waiter got %+v", p)
	}
	cl.settle()
	for i, s := range cl.servers {
		if h := holderAt(t, s.Client(), "redlockd:lock:/s#0"); h != p.Token {
			t.Errorf("node %d: permit 0 held by %q, want the waiter", i, h)
		}
	}
}

// waitingPermit starts an acquire of a permit of semaphore "s" of limit on
// c, owned "waiter", that waits up to 20s; its permit comes on the channel.
func waitingPermit(t *testing.T, c *Coordinator, limit int) chan Permit {
	got := make(chan Permit, 1)
	go func() {
		p, err := c.AcquirePermit(t.Context(), "s", permitOpts(limit, AcquireOptions{Wait: 20 * time.Second, Owner: "waiter"}))
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	return got
}

// waitRefused waits until the waiter for semaphore "s" on c pauses after a
// refused round (a head also counts as idle before its first round).
func waitRefused(t *testing.T, c *Coordinator) {
	t.Helper()
	eventually(t, patience, "the waiter's round refused", func() bool { return c.Stats().Held == 1 })
	waitPaused(t, c, "s")
}

// waiterToken is the token of the first waiter for semaphore name on c.
func waiterToken(c *Coordinator, name string) string {
	c.hub.mu.Lock()
	defer c.hub.mu.Unlock()
	return c.hub.queues[c.semaphoreKeysOf("", name).queue()].ws[0].a.token
}

// TestSemaphoreHandOverAfterWakeUp: a head that the release of one permit
// woke takes the hand-over of another before its round: nobody else was
// woken for the permit released, so the next head tries at once, and takes
// it, instead of pausing behind a semaphore it takes as full until the first
// expiry (the permit idle meanwhile).
func TestSemaphoreHandOverAfterWakeUp(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Minute})
	c, ctx := cl.c, t.Context()
	other := cl.gateway(t)
	held, got := fullWithWaiters(t, c, c, 2, 3) // 20s permits
	queue := c.semaphoreKeysOf("", "s").queue()
	// Both heads were woken, their rounds not yet sent (as notify leaves
	// them): the release below wakes none of them again.
	c.hub.mu.Lock()
	for _, w := range c.hub.queues[queue].first() {
		w.freed.Store(int64(held[1].Index) + 1)
	}
	c.hub.mu.Unlock()
	if err := other.ReleasePermit(ctx, "", "s", held[1].Token); err != nil { // announced
		t.Fatal(err)
	}
	if err := c.ReleasePermit(ctx, "", "s", held[0].Token); err != nil { // handed to head 0
		t.Fatal(err)
	}
	first := <-got
	if first.Owner != "0" {
		t.Fatalf("the hand-over went to %q", first.Owner)
	}
	select {
	case p := <-got:
		if p.Owner != "2" || p.Index != held[1].Index {
			t.Errorf("the released permit went to %+v, want waiter 2", p)
		}
	case <-time.After(patience):
		t.Fatalf("the released permit still idle after %v", patience)
	}
	if err := c.ReleasePermit(ctx, "", "s", first.Token); err != nil { // to waiter 1
		t.Fatal(err)
	}
	<-got
}

// TestSemaphorePausedHeadWakesAtExpiry: a head that pauses behind a
// hand-over on a full semaphore (see TestSemaphoreHandOverChain) still takes
// a permit that expires unreleased, when the first expiry its queue learned
// comes, long before the fallback poll.
func TestSemaphorePausedHeadWakesAtExpiry(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Hour})
	c, ctx := cl.c, t.Context()
	const limit = 2
	long, err := c.AcquirePermit(ctx, "s", permitOpts(limit, AcquireOptions{TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquirePermit(ctx, "s", permitOpts(limit, AcquireOptions{TTL: time.Second})); err != nil { // never released
		t.Fatal(err)
	}
	var got [3]chan Permit
	var cancel [3]context.CancelFunc
	for i := range got {
		got[i] = make(chan Permit, 1)
		wctx, stop := context.WithCancel(ctx)
		cancel[i] = stop
		go func() {
			p, err := c.AcquirePermit(wctx, "s", permitOpts(limit, AcquireOptions{Wait: time.Minute, TTL: time.Minute, Owner: strconv.Itoa(i)}))
			if err != nil && wctx.Err() == nil {
				t.Error(err)
			}
			got[i] <- p
		}()
		eventually(t, patience, "the waiter to queue", func() bool { return c.Stats().Waiting == int64(i+1) })
	}
	queue := c.semaphoreKeysOf("", "s").queue()
	waitPausedIn(t, c, queue, 3)                                      // waiters 0 and 1 refused: every permit held
	if err := c.ReleasePermit(ctx, "", "s", long.Token); err != nil { // handed to waiter 0
		t.Fatal(err)
	}
	if p := <-got[0]; p.Owner != "0" {
		t.Fatalf("waiter 0 got %+v", p)
	}
	cancel[1]() // waiter 2, made a head by the hand-over and paused, is left
	<-got[1]
	select {
	case p := <-got[2]:
		if p.Owner != "2" {
			t.Fatalf("waiter 2 got %+v", p)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiter 2 did not take the expired permit within 30s (the fallback poll is 1h)")
	}
}

// TestSemaphoreOnePermit: a token that holds different permits on different
// nodes (left by a client token's rounds on several permits) holds none of
// them unless a quorum holds one: extend refuses it.
func TestSemaphoreOnePermit(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	c, ctx := cl.c, t.Context()
	tok := mixedPermits(t, cl)
	if p, err := c.ExtendPermit(ctx, "", "s", tok, 0); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("extend of permits 1, 1, 2 on 3 of 5 nodes: %+v, %v; want ErrLockExpired", p, err)
	}
}

// TestSemaphoreReleaseOnePermit: a release of a token that holds different
// permits on different nodes, none on a quorum, is told it did not hold
// the semaphore; it deletes them all the same.
func TestSemaphoreReleaseOnePermit(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	c, ctx := cl.c, t.Context()
	tok := mixedPermits(t, cl)
	if err := c.ReleasePermit(ctx, "", "s", tok); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("release of permits 1, 1, 2 on 3 of 5 nodes: %v; want ErrLockExpired", err)
	}
	cl.settle()
	for i, s := range cl.servers[:3] {
		for _, p := range []string{"s#1", "s#2"} {
			if h := holderAt(t, s.Client(), "redlockd:lock:/"+p); h != "" {
				t.Errorf("node %d: permit %s still held by %s", i, p, h)
			}
		}
	}
}

// mixedPermits makes a token hold permit 1 of semaphore "s" (limit 3) on
// nodes 0 and 1 and permit 2 on node 2: no permit on a quorum of 5.
func mixedPermits(t *testing.T, cl *cluster) string {
	t.Helper()
	tok := NewToken()
	putPermit(t, cl, "s", tok, Permit{Index: 1, Limit: 3}, 0, 1)
	putPermit(t, cl, "s", tok, Permit{Index: 2, Limit: 3}, 2)
	return tok
}

// putPermit makes token hold permit p of semaphore name on the nodes idxs
// for a minute, as a permit script leaves it (the permit's lock key and the
// index of the permits): with reassert, which puts a permit back.
func putPermit(t *testing.T, cl *cluster, name, token string, p Permit, idxs ...int) {
	t.Helper()
	cl.c.reassert(t.Context(), permitTarget{k: cl.c.semaphoreKeysOf("", name)}, token, idxs, time.Minute, 1, "", ModeWrite, p)
	cl.settle()
	for _, i := range idxs {
		if h := holderAt(t, cl.servers[i].Client(), "redlockd:lock:/"+name+"#"+strconv.Itoa(p.Index)); h != token {
			t.Fatalf("node %d: permit %d held by %q", i, p.Index, h)
		}
	}
}

// TestSemaphoreNodeWorkIndependentOfLimit: the commands a node runs for an
// acquire, a refused acquire on a full semaphore, an extend, a release and a
// hand-over are as many at limit 256 as at limit 2, and an inspect's grow
// with the permits held, not with the limit (see docs/semaphores.md, how a
// node finds permits).
func TestSemaphoreNodeWorkIndependentOfLimit(t *testing.T) {
	small, large := semaphoreWork(t, 2), semaphoreWork(t, MaxLimit)
	t.Logf("commands run inside scripts on 3 nodes, limit 2: %v; limit %d: %v", small, MaxLimit, large)
	for _, op := range []string{"acquire", "refused", "extend", "hand-over", "release", "inspect 2 held"} {
		if small[op] == 0 || large[op] != small[op] {
			t.Errorf("%s: %d commands at limit %d, %d at limit 2", op, large[op], MaxLimit, small[op])
		}
	}
	// The first acquire of a semaphore reads the index (ZRANGE: none held, so
	// the token holds none) and the limit, runs the lock's acquire (GET, INCR,
	// SET, and a SET of the new fence counter), writes the limit, and notes
	// the permit (TIME, 2 ZADD, 3 PEXPIRE): it knows the permit is the only
	// one held, so that no holder of it is left to drop and when the index
	// must expire, without reading it.
	if got := small["acquire"] / 3; got > 13 {
		t.Errorf("acquire of an idle semaphore: %d commands per node, want at most 13", got)
	}
	// A release reads the limit, the holder's index entry, and the permit's
	// record once; announces it, as the waiter served just before left the
	// semaphore's waiting key (EXISTS, PUBLISH); and writes the record, the
	// index (2) and the semaphore's releases (LPUSH, PEXPIRE: an LTRIM only
	// once the list is full).
	if got := small["release"] / 3; got > 10 {
		t.Errorf("release: %d commands per node, want at most 10", got)
	}
	// An extend reads the limit, the holder's index entry and the permit's
	// record once, extends it (PEXPIRE), and notes when it expires (TIME,
	// PTTL, ZADD, and the index's TTLs: ZRANGE, 3 PEXPIRE).
	if got := small["extend"] / 3; got > 11 {
		t.Errorf("extend: %d commands per node, want at most 11", got)
	}
	// Inspect reads each permit held: a few commands per permit, whatever the limit.
	if per := (large["inspect all held"] - large["inspect 2 held"]) / (3 * (MaxLimit - 2)); per > 4 {
		t.Errorf("inspect: %d commands per node and permit held", per)
	}
}

// semaphoreWork counts the commands that 3 nodes run inside scripts for
// each call on a semaphore of the limit: an acquire of an idle one, a
// refused acquire once every permit is held, an extend, the hand-over of a
// released permit to a waiter, a release, and inspects with every permit
// held and with 2.
func semaphoreWork(t *testing.T, limit int) map[string]int64 {
	cl := newCluster(t, 3, Options{HealthInterval: time.Hour, PollInterval: time.Minute})
	for _, n := range cl.c.nodes {
		<-n.firstDone // no health check runs while the commands are counted
	}
	c, ctx := cl.c, t.Context()
	work := map[string]int64{}
	count := func(op string, call func()) {
		t.Helper()
		before := cl.scriptCommands(t)
		call()
		work[op] = cl.scriptCommands(t) - before
	}
	var held []Permit
	acquire := func() {
		t.Helper()
		p, err := c.AcquirePermit(ctx, "s", permitOpts(limit, AcquireOptions{TTL: time.Minute}))
		if err != nil {
			t.Fatalf("acquire %d of %d: %v", len(held)+1, limit, err)
		}
		held = append(held, p)
	}
	count("acquire", acquire)
	for len(held) < limit {
		acquire()
	}
	count("refused", func() {
		if _, err := c.AcquirePermit(ctx, "s", permitOpts(limit, AcquireOptions{})); !errors.Is(err, ErrLockHeld) {
			t.Fatalf("acquire of a full semaphore: %v, want ErrLockHeld", err)
		}
	})
	count("extend", func() {
		if _, err := c.ExtendPermit(ctx, "", "s", held[0].Token, time.Minute); err != nil {
			t.Fatalf("extend: %v", err)
		}
	})
	count("inspect all held", func() {
		if info, err := c.InspectSemaphore(ctx, "", "s"); err != nil || len(info.Permits) != limit {
			t.Fatalf("inspect: %d permits, %v", len(info.Permits), err)
		}
	})
	got := make(chan Permit, 1)
	go func() {
		p, err := c.AcquirePermit(context.Background(), "s", permitOpts(limit, AcquireOptions{Wait: 20 * time.Second, TTL: time.Minute}))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- p
	}()
	waitPaused(t, c, "s")
	count("hand-over", func() {
		if err := c.ReleasePermit(ctx, "", "s", held[0].Token); err != nil {
			t.Fatalf("release to the waiter: %v", err)
		}
		held[0] = <-got
	})
	count("release", func() {
		if err := c.ReleasePermit(ctx, "", "s", held[0].Token); err != nil {
			t.Fatalf("release: %v", err)
		}
	})
	held = held[1:]
	acquire() // every permit held again
	for _, p := range held[:limit-2] {
		if err := c.ReleasePermit(ctx, "", "s", p.Token); err != nil {
			t.Fatal(err)
		}
	}
	count("inspect 2 held", func() {
		if info, err := c.InspectSemaphore(ctx, "", "s"); err != nil || len(info.Permits) != 2 {
			t.Fatalf("inspect: %d permits, %v", len(info.Permits), err)
		}
	})
	return work
}

// scriptCommands is how many commands the nodes have run inside scripts,
// once every command sent so far has its answer (see settle): every command
// INFO commandstats counts but the scripts' own EVALSHA and EVAL and those
// sent by clients (PING, INFO, SUBSCRIBE, a new connection's HELLO and
// CLIENT SETINFO, SCRIPT LOAD). The health checks must not run meanwhile.
func (cl *cluster) scriptCommands(t *testing.T) int64 {
	return cl.calls(t, func(name string) bool {
		return !strings.Contains(name, "|") && !slices.Contains([]string{"evalsha", "eval", "ping", "info", "subscribe", "hello", "select"}, name)
	})
}

// calls counts the calls of the commands named so far, on every node.
func (cl *cluster) calls(t *testing.T, named func(string) bool) int64 {
	t.Helper()
	cl.settle()
	var n int64
	for _, s := range cl.servers {
		stats, err := s.CommandStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for name, st := range stats {
			if named(name) {
				n += st.Calls
			}
		}
	}
	return n
}

// TestSemaphoreFreePermitReported: a node that refuses the permit asked for
// while it has room reports the first permit free after it (cyclically),
// found in its index of the permits whatever their number; with every
// permit held, the one that expires first.
func TestSemaphoreFreePermitReported(t *testing.T) {
	cl := newCluster(t, 1, Options{})
	held := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12}
	for p := 200; p < MaxLimit; p++ {
		held = append(held, p)
	}
	for _, p := range held {
		putPermit(t, cl, "s", NewToken(), Permit{Index: p, Limit: MaxLimit}, 0)
	}
	for _, c := range []struct{ ask, free int }{{5, 10}, {9, 10}, {11, 13}, {200, 10}, {255, 10}} {
		if permit, free := askPermit(t, cl, "s", c.ask, MaxLimit); permit != c.ask || !slices.Equal(free, []int{c.free}) {
			t.Errorf("asked for permit %d: refused for %d, free %v; want free [%d]", c.ask, permit, free, c.free)
		}
	}
	// Every permit held: the one that expires first (permit 0, put first).
	full := newCluster(t, 1, Options{})
	for p := range 3 {
		putPermit(t, full, "s", NewToken(), Permit{Index: p, Limit: 3}, 0)
	}
	if permit, free := askPermit(t, full, "s", 2, 3); permit != 0 || len(free) != 0 {
		t.Errorf("asked for permit 2 of a full semaphore: refused for %d, free %v; want 0 and none", permit, free)
	}
}

// askPermit runs the acquire script of a permit of semaphore name on node 0
// asking for permit ask, and returns the permit of its refusal and the
// free permits it reports.
func askPermit(t *testing.T, cl *cluster, name string, ask, limit int) (permit int, free []int) {
	t.Helper()
	a := &permitKind{limit: limit, prefer: ask}
	keys := cl.c.semaphoreKeysOf("", name).acquire()
	args := []any{NewToken(), time.Minute.Milliseconds(), "", 0, 0, ask, limit}
	r, err := a.parser(ask)(permitScripts[scriptAcquire].Run(t.Context(), cl.c.nodes[0].client, keys, args...))
	if err != nil || r.ok {
		t.Fatalf("asked for permit %d: %+v, %v; want a refusal", ask, r, err)
	}
	return r.permit, r.free
}

// TestSemaphoreIndexKeysLiveAsLongAsPermits: the keys of a node's index of
// a semaphore's permits (limit, permits, holders) expire, never before the
// longest-lived permit they describe: after the acquire of the only permit
// held, after an acquire, after an extend, after an acquire of a permit that
// expires before another, and after a release.
func TestSemaphoreIndexKeysLiveAsLongAsPermits(t *testing.T) {
	cl := newCluster(t, 1, Options{MaxTTL: 10 * time.Minute})
	c, ctx := cl.c, t.Context()
	short, err := c.AcquirePermit(ctx, "s", permitOpts(3, AcquireOptions{TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	rdb := cl.servers[0].Client()
	check := func(when string, atLeast time.Duration) {
		t.Helper()
		for _, k := range c.semaphoreKeysOf("", "s").index() {
			if d, err := rdb.PTTL(ctx, k).Result(); err != nil || d < atLeast || d > 10*time.Minute {
				t.Errorf("%s: %s expires in %v, %v; want at least %v", when, k, d, err, atLeast)
			}
		}
	}
	check("after an acquire of 1 minute, the only permit held", 30*time.Second)
	long, err := c.AcquirePermit(ctx, "s", permitOpts(3, AcquireOptions{TTL: 3 * time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	check("after acquires of 1 and 3 minutes", 2*time.Minute)
	if _, err := c.ExtendPermit(ctx, "", "s", short.Token, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	check("after an extend to 5 minutes", 4*time.Minute)
	if _, err := c.AcquirePermit(ctx, "s", permitOpts(3, AcquireOptions{TTL: time.Minute})); err != nil {
		t.Fatal(err)
	}
	check("after an acquire of 1 minute", 4*time.Minute)
	if err := c.ReleasePermit(ctx, "", "s", long.Token); err != nil {
		t.Fatal(err)
	}
	check("after a release", 4*time.Minute)
}

// TestPermitReleasesRemembered: a semaphore remembers at least its last 8
// releases per permit of its limit on a node, as a lock its last 8 (by
// their tokens' fingerprints, never the tokens), in one key however many
// were released, trimmed back to those when it holds twice as many: a
// retried release of one it holds works, of an older one does not; the
// semaphore leaves a fixed set of keys, each with a TTL, the releases'
// living max TTL after the last.
func TestPermitReleasesRemembered(t *testing.T) {
	cl := newCluster(t, 3, Options{MaxTTL: 6 * time.Second, DefaultTTL: 3 * time.Second})
	ctx, name := t.Context(), uniq(t)
	const limit, cycles = 2, 40 // 40 releases: trimmed once, at the 33rd, to 16
	k := cl.c.semaphoreKeysOf("", name)
	var toks []string
	kept := 0 // the releases the list holds, by the rule above
	for range cycles {
		p, err := cl.c.AcquirePermit(ctx, name, permitOpts(limit, AcquireOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.c.ReleasePermit(ctx, "", name, p.Token); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, p.Token)
		if kept++; kept > 16*limit {
			kept = 8 * limit
		}
		cl.settle()
		for i, s := range cl.servers {
			if n := s.Client().LLen(ctx, k.Released).Val(); n != int64(kept) {
				t.Fatalf("node %d: %d releases remembered after %d, want %d", i, n, len(toks), kept)
			}
			if ttl := s.Client().PTTL(ctx, k.Released).Val(); ttl <= 0 {
				t.Fatalf("node %d: the releases expire in %v after %d, want a TTL", i, ttl, len(toks))
			}
		}
	}
	held, err := cl.c.AcquirePermit(ctx, name, permitOpts(limit, AcquireOptions{TTL: 6 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range toks {
		err := cl.c.ReleasePermit(ctx, "", name, tok)
		if remembered := i >= cycles-kept; remembered != (err == nil) {
			t.Fatalf("retried release of the %d-th of %d releases err = %v, want remembered %v", i+1, cycles, err, remembered)
		}
	}
	cl.settle()
	want := []string{k.Permit.Lock + "0", k.Permit.Lock + "1", k.Permit.Fence, k.Limit, k.Permits, k.Holders, k.Released}
	for i, s := range cl.servers {
		rdb := s.Client()
		keys, err := rdb.Keys(ctx, "redlockd:*"+name+"*").Result()
		if err != nil || len(keys) < len(want)-1 || slices.ContainsFunc(keys, func(k string) bool { return !slices.Contains(want, k) }) {
			t.Fatalf("node %d: keys %v, %v; want those of %v (a permit's lock key or both)", i, keys, err, want)
		}
		for _, key := range keys {
			if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
				t.Errorf("node %d: %s expires in %v", i, key, ttl)
			}
		}
		var fps []string
		for _, tok := range slices.Backward(toks[cycles-kept:]) {
			fps = append(fps, fingerprint(tok))
		}
		if got := rdb.LRange(ctx, k.Released, 0, -1).Val(); !slices.Equal(got, fps) {
			t.Errorf("node %d: releases remembered %v, want the fingerprints of the last %d, newest first: %v", i, got, kept, fps)
		}
	}
	if err := cl.c.ReleasePermit(ctx, "", name, held.Token); err != nil {
		t.Fatal(err)
	}
	cl.settle()
	for i, s := range cl.servers {
		if ttl := s.Client().PTTL(ctx, k.Released).Val(); ttl <= 3*time.Second || ttl > 6*time.Second {
			t.Errorf("node %d: the releases expire in %v, want max TTL", i, ttl)
		}
	}
}

// TestSemaphoreExpiredPermitSwept: a permit that expired is free for the
// next acquire, and leaves the node's index (its holder's entry too).
func TestSemaphoreExpiredPermitSwept(t *testing.T) {
	cl := newCluster(t, 1, Options{})
	c, ctx := cl.c, t.Context()
	gone, err := c.AcquirePermit(ctx, "s", permitOpts(1, AcquireOptions{TTL: 5 * MinTTL}))
	if err != nil {
		t.Fatal(err)
	}
	var p Permit
	eventually(t, patience, "the expired permit free", func() bool {
		p, err = c.AcquirePermit(ctx, "s", permitOpts(1, AcquireOptions{}))
		return err == nil
	})
	keys := c.semaphoreKeysOf("", "s")
	rdb := cl.servers[0].Client()
	if holders, err := rdb.ZRange(ctx, keys.Holders, 0, -1).Result(); err != nil || !slices.Equal(holders, []string{p.Token}) {
		t.Errorf("holders %v, %v; want only the new holder's token (not %s)", holders, err, gone.Token)
	}
	if permits, err := rdb.ZRange(ctx, keys.Permits, 0, -1).Result(); err != nil || !slices.Equal(permits, []string{"0"}) {
		t.Errorf("permits %v, %v; want [0]", permits, err)
	}
}

// TestSemaphoreHoldersNeverOutlivePermits: the index's holders expire no
// later than its permits, so that no script finds holders alive once
// permits expired (record takes an empty permits for an empty holders: a
// stale holder of a permit would stay beside its new one). A grant sets
// their TTLs with a PEXPIRE each, between which the node's clock may tick:
// with holders' last, 2,000 grants found holders a millisecond later in 3
// runs of 4. One permit is held throughout, another taken and released.
func TestSemaphoreHoldersNeverOutlivePermits(t *testing.T) {
	cl := newCluster(t, 1, Options{})
	c, ctx := cl.c, t.Context()
	keys := c.semaphoreKeysOf("", "s")
	rdb := cl.servers[0].Client()
	if _, err := c.AcquirePermit(ctx, "s", permitOpts(2, AcquireOptions{TTL: 30 * time.Second})); err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		p, err := c.AcquirePermit(ctx, "s", permitOpts(2, AcquireOptions{TTL: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		permits, err := rdb.PExpireTime(ctx, keys.Permits).Result()
		if err != nil {
			t.Fatal(err)
		}
		holders, err := rdb.PExpireTime(ctx, keys.Holders).Result()
		if err != nil {
			t.Fatal(err)
		}
		if holders <= 0 || holders > permits {
			t.Fatalf("grant %d: holders expire at %d, permits at %d (ms since 1970)", i, holders.Milliseconds(), permits.Milliseconds())
		}
		if err := c.ReleasePermit(ctx, "", "s", p.Token); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPermitReleaseStaleEntry: a release whose token the index still names
// on a permit whose record no longer does (the key gone, or another token's)
// answers as a release that finds no permit: expired, nothing remembered,
// the other holder's record untouched; and the stale entry leaves the index.
func TestPermitReleaseStaleEntry(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	ctx := t.Context()
	for _, other := range []string{"", NewToken()} {
		name := uniq(t)
		p, err := cl.c.AcquirePermit(ctx, name, permitOpts(2, AcquireOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		k := cl.c.semaphoreKeysOf("", name)
		lock := k.Permit.Lock + strconv.Itoa(p.Index)
		cl.settle()
		for _, s := range cl.servers {
			if other == "" {
				s.Client().Del(ctx, lock)
			} else {
				s.Client().Set(ctx, lock, other+" 7 - - - ", time.Minute)
			}
		}
		for range 2 { // the retry too: the first was not remembered
			if err := cl.c.ReleasePermit(ctx, "", name, p.Token); !errors.Is(err, ErrLockExpired) {
				t.Fatalf("other holder %q: release err = %v, want %v", other, err, ErrLockExpired)
			}
		}
		cl.settle()
		for i, s := range cl.servers {
			rdb := s.Client()
			if err := rdb.ZScore(ctx, k.Holders, p.Token).Err(); err != redis.Nil {
				t.Errorf("other holder %q, node %d: the token's index entry: %v, want none", other, i, err)
			}
			if got := rdb.LRange(ctx, k.Released, 0, -1).Val(); slices.Contains(got, fingerprint(p.Token)) {
				t.Errorf("other holder %q, node %d: the release remembered", other, i)
			}
			if other != "" && holderAt(t, rdb, lock) != other {
				t.Errorf("node %d: the permit's record %q, want the other holder's", i, rdb.Get(ctx, lock).Val())
			}
		}
	}
}
