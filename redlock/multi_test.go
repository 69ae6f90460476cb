package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// names returns n resource names unique to this test run.
func names(t *testing.T, n int) []string {
	var rs []string
	for range n {
		rs = append(rs, uniq(t))
	}
	return rs
}

// keysSet counts the keys of resource (lock, meta, fence) on every node.
func (cl *cluster) keysSet(resource string) int64 {
	cl.settle()
	var n int64
	for _, s := range cl.servers {
		for _, k := range []string{"lock", "meta", "fence"} {
			v, _ := s.Client().Exists(context.Background(), "redlockd:"+k+":/"+resource).Result()
			n += v
		}
	}
	return n
}

// TestMulti: a lock on {a,b,c} takes every resource with a fence greater
// than each one's before, shows as each one's writer, is re-acquired with
// the same token and extended with the same fences, and its release frees
// every resource (again: idempotent).
func TestMulti(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	c, ctx, rs := cl.c, t.Context(), names(t, 3)
	before := make([]int64, len(rs))
	for i, r := range rs[:2] { // a and b have fences already, c none
		for range i + 1 {
			l, err := c.Acquire(ctx, r, AcquireOptions{})
			if err != nil {
				t.Fatal(err)
			}
			before[i] = l.Fence
			if err := c.Release(ctx, "", r, l.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := range 2 {
		m, err := c.AcquireMulti(ctx, rs, AcquireOptions{Owner: "m", TTL: 10 * time.Second, Token: NewToken()})
		if err != nil || len(m.Fences) != len(rs) || m.Locked < c.Quorum() || m.Validity <= 0 || m.Owner != "m" {
			t.Fatalf("round %d: %+v, %v", round, m, err)
		}
		for i, r := range rs {
			if m.Fences[i] <= before[i] {
				t.Fatalf("round %d: %s's fence %d, want above %d", round, r, m.Fences[i], before[i])
			}
			info, err := c.Inspect(ctx, "", r)
			if err != nil || info.Mode != ModeWrite || info.Owner != "m" || info.Fence != m.Fences[i] {
				t.Fatalf("inspect %s: %+v, %v; want the lock's writer, fence %d", r, info, err, m.Fences[i])
			}
		}
		again, err := c.AcquireMulti(ctx, rs, AcquireOptions{Token: m.Token, Owner: "m"})
		if err != nil || !slices.Equal(again.Fences, m.Fences) {
			t.Fatalf("idempotent re-acquire: %+v, %v; want fences %v", again, err, m.Fences)
		}
		if _, err := c.AcquireMulti(ctx, rs[1:], AcquireOptions{}); !errors.Is(err, ErrLockHeld) {
			t.Fatalf("another lock on held resources: %v", err)
		}
		ext, err := c.ExtendMulti(ctx, "", rs, m.Token, 20*time.Second)
		if err != nil || !slices.Equal(ext.Fences, m.Fences) || ext.TTL != 20*time.Second {
			t.Fatalf("extend: %+v, %v; want fences %v", ext, err, m.Fences)
		}
		for range 2 {
			if err := c.ReleaseMulti(ctx, "", rs, m.Token); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
		for _, r := range rs {
			if cl.holders(t, r, "") != 0 {
				t.Fatalf("%s still held after the release", r)
			}
		}
		if _, err := c.ExtendMulti(ctx, "", rs, m.Token, 0); !errors.Is(err, ErrLockExpired) {
			t.Fatalf("extend after the release: %v", err)
		}
		copy(before, m.Fences)
	}
}

// TestMultiRefused: a lock on several resources is refused when one of
// them is held, by a writer or by readers, and then sets nothing on any
// node for the others; a round refused by a quorum is undone where it was
// granted.
func TestMultiRefused(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	c, ctx, rs := cl.c, t.Context(), names(t, 3)
	for _, o := range []AcquireOptions{{}, read} {
		l, err := c.Acquire(ctx, rs[1], o)
		if err != nil {
			t.Fatal(err)
		}
		for _, wait := range []time.Duration{0, 200 * time.Millisecond} {
			var he *HeldError
			if _, err := c.AcquireMulti(ctx, rs, AcquireOptions{Wait: wait}); !errors.As(err, &he) || he.Remaining <= 0 {
				t.Fatalf("%s holds %s, wait %v: %v", l.Mode, rs[1], wait, err)
			}
			for _, r := range []string{rs[0], rs[2]} {
				if n := cl.keysSet(r); n != 0 {
					t.Fatalf("%s holds %s, wait %v: %d keys of %s set", l.Mode, rs[1], wait, n, r)
				}
			}
		}
		if err := c.Release(ctx, "", rs[1], l.Token); err != nil {
			t.Fatal(err)
		}
	}
	// Another token holds a on a quorum only: the node that granted every
	// resource is undone.
	for _, i := range []int{0, 1} {
		if err := cl.servers[i].Client().Set(ctx, "redlockd:lock:/"+rs[0], "other", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AcquireMulti(ctx, rs, AcquireOptions{}); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("a held on a quorum: %v", err)
	}
	for _, r := range rs[1:] {
		if n := cl.holders(t, r, ""); n != 0 {
			t.Fatalf("%s left on %d nodes after a refused round", r, n)
		}
	}
	cl.dropLock(t, rs[0], 0, 1)
	// And the other way: a lock on several resources keeps readers and
	// writers out of each.
	m, err := c.AcquireMulti(ctx, rs, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []AcquireOptions{{}, read} {
		if _, err := c.Acquire(ctx, rs[2], o); !errors.Is(err, ErrLockHeld) {
			t.Fatalf("%s while a lock on several holds it: %v", o.Mode, err)
		}
	}
	if err := c.ReleaseMulti(ctx, "", rs, m.Token); err != nil {
		t.Fatal(err)
	}
}

// TestMultiInvalid: no resources, too many, one twice, a bad name or
// token, or a reader's mode are ErrInvalid, and no command is sent.
func TestMultiInvalid(t *testing.T) {
	var sent atomic.Int64
	cl := newCluster(t, 3, Options{Observer: onNodeCommand(func(string, time.Duration, error) { sent.Add(1) })})
	c, ctx := cl.c, t.Context()
	many := make([]string, MaxResources+1)
	for i := range many {
		many[i] = "r" + strings.Repeat("x", i)
	}
	token := NewToken()
	for _, rs := range [][]string{nil, {}, many, {"a", "b", "a"}, {"a", "b/c"}, {"a", ".."}} {
		if _, err := c.AcquireMulti(ctx, rs, AcquireOptions{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("acquire %q: %v", rs, err)
		}
		if _, err := c.ExtendMulti(ctx, "", rs, token, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("extend %q: %v", rs, err)
		}
		if err := c.ReleaseMulti(ctx, "", rs, token); !errors.Is(err, ErrInvalid) {
			t.Errorf("release %q: %v", rs, err)
		}
	}
	ok := many[:MaxResources]
	for _, o := range []AcquireOptions{{Mode: ModeRead}, {Token: "short"}, {Namespace: "a/b"}, {TTL: time.Millisecond}} {
		if _, err := c.AcquireMulti(ctx, ok, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("acquire with %+v: %v", o, err)
		}
	}
	if _, err := c.ExtendMulti(ctx, "", ok, "short", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("extend with a bad token: %v", err)
	}
	if _, err := c.ExtendMulti(ctx, "", ok, token, time.Hour); !errors.Is(err, ErrInvalid) {
		t.Errorf("extend with a bad ttl: %v", err)
	}
	if err := c.ReleaseMulti(ctx, "", ok, "short"); !errors.Is(err, ErrInvalid) {
		t.Errorf("release with a bad token: %v", err)
	}
	if n := sent.Load(); n != 0 || c.Stats().Attempts != 0 {
		t.Fatalf("%d commands sent for bad input", n)
	}
	m, err := c.AcquireMulti(ctx, ok, AcquireOptions{}) // MaxResources is allowed
	if err != nil || len(m.Fences) != MaxResources {
		t.Fatalf("%d resources: %+v, %v", MaxResources, m, err)
	}
}

// TestMultiNodesDown: two nodes of five down change nothing.
func TestMultiNodesDown(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	c, ctx, rs := cl.c, t.Context(), names(t, 3)
	cl.setDown(0b10010)
	m, err := c.AcquireMulti(ctx, rs, AcquireOptions{})
	if err != nil || m.Locked != 3 {
		t.Fatalf("acquire: %+v, %v", m, err)
	}
	if _, err := c.ExtendMulti(ctx, "", rs, m.Token, 0); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if _, err := c.AcquireMulti(ctx, rs[:1], AcquireOptions{}); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("another lock: %v", err)
	}
	if err := c.ReleaseMulti(ctx, "", rs, m.Token); err != nil {
		t.Fatalf("release: %v", err)
	}
	cl.setDown(0b10011)
	if _, err := c.AcquireMulti(ctx, rs, AcquireOptions{}); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("three nodes down: %v", err)
	}
}

// TestMultiWaiterWakes: a waiting lock on {a,b} is woken (not polled) when
// the lock on b is released, and a waiter for a alone behind it gets a
// after it.
func TestMultiWaiterWakes(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Minute}) // no fallback poll: only wake-ups
	c, ctx, rs := cl.c, t.Context(), names(t, 2)
	held, err := c.Acquire(ctx, rs[1], AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan MultiLock, 1)
	go func() {
		m, err := c.AcquireMulti(context.Background(), rs, AcquireOptions{Wait: 20 * time.Second, TTL: 30 * time.Second})
		if err != nil {
			t.Errorf("waiting lock: %v", err)
		}
		got <- m
	}()
	eventually(t, patience, "the waiting lock refused once", func() bool { return c.Stats().Held > 0 }) // it waits
	if _, err := c.Acquire(ctx, rs[0], AcquireOptions{}); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("a is free, but a lock on it waits here first: %v", err)
	}
	behind := make(chan Lock, 1)
	go func() {
		l, err := c.Acquire(context.Background(), rs[0], AcquireOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Errorf("waiter for a: %v", err)
		}
		behind <- l
	}()
	eventually(t, patience, "two waiters", func() bool { return c.Stats().Waiting == 2 })
	start := time.Now()
	if err := c.Release(ctx, "", rs[1], held.Token); err != nil {
		t.Fatal(err)
	}
	m := <-got
	if d := time.Since(start); d > patience {
		t.Fatalf("served after %v: polled, not woken", d)
	}
	select {
	case <-behind:
		t.Fatal("the waiter for a got it while the lock on {a,b} held it")
	default:
	}
	if err := c.ReleaseMulti(ctx, "", rs, m.Token); err != nil {
		t.Fatal(err)
	}
	<-behind
	if d := time.Since(start); d > patience {
		t.Fatalf("waiter behind served after %v", d)
	}
}

// TestMultiNoDeadlock: two clients, on two gateways, taking {a,b} and
// {b,a} again and again both progress: never a deadlock. Then the same on
// one gateway, whose queues serve them in turn.
func TestMultiNoDeadlock(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	rs := names(t, 2)
	gateways := []*Coordinator{cl.c, cl.gateway(t)}
	for _, same := range []bool{false, true} {
		var wg sync.WaitGroup
		var done [2]atomic.Int64
		for i := range 2 {
			c := gateways[i]
			if same {
				c = cl.c
			}
			order := []string{rs[i], rs[1-i]}
			wg.Go(func() {
				for range 200 {
					m, err := c.AcquireMulti(t.Context(), order, AcquireOptions{Wait: 2 * patience, TTL: patience})
					if err != nil {
						t.Errorf("client %d after %d locks: %v", i, done[i].Load(), err)
						return
					}
					done[i].Add(1)
					if err := c.ReleaseMulti(t.Context(), "", order, m.Token); err != nil {
						t.Errorf("client %d: release: %v", i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if done[0].Load() != 200 || done[1].Load() != 200 {
			t.Fatalf("one gateway %v: %d and %d locks of 200", same, done[0].Load(), done[1].Load())
		}
	}
}
