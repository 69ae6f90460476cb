package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/checker"
	"github.com/redlockd/redlockd/internal/redistest"
)

// dropLock deletes resource's lock key (its record) on the servers idxs, as
// if the lock had expired there.
func (cl *cluster) dropLock(t *testing.T, resource string, idxs ...int) {
	t.Helper()
	for _, i := range idxs {
		c := cl.servers[i].Client()
		if err := c.Del(context.Background(), "redlockd:lock:/"+resource).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReacquireAfterLossGetsNewFence: a token that lost the lock (it lives
// on a minority) and re-acquires after another holder is a new acquisition
// with a greater fence, not its old one.
func TestReacquireAfterLossGetsNewFence(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	tok := NewToken() + "client"
	t1, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cl.dropLock(t, res, 2, 3, 4) // T's lock expired on 3 nodes, lives on 2
	v, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil || v.Fence <= t1.Fence {
		t.Fatalf("V's acquire = %+v, %v; want a fence above %d", v, err, t1.Fence)
	}
	if err := cl.c.Release(ctx, "", res, v.Token); err != nil {
		t.Fatal(err)
	}
	t2, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if t2.Fence <= v.Fence {
		t.Fatalf("T's re-acquire fence %d, want above V's %d (T's first was %d)", t2.Fence, v.Fence, t1.Fence)
	}
	// The new fence is committed everywhere, so a further re-acquire keeps it.
	t3, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil || t3.Fence != t2.Fence {
		t.Fatalf("second re-acquire = %+v, %v; want fence %d", t3, err, t2.Fence)
	}
	if info, err := cl.c.Inspect(ctx, "", res); err != nil || info.Fence != t2.Fence {
		t.Fatalf("inspect = %+v, %v; want fence %d", info, err, t2.Fence)
	}
}

// TestReacquireIgnoresStaleRecords: records a failed attempt left on a
// quorum (SETs that landed late, with only the nodes' tentative fences) do
// not let a re-acquire keep the old fence of the one node still holding the
// token's earlier lock.
func TestReacquireIgnoresStaleRecords(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	tok := NewToken() + "client"
	// Counters that disagree: T's fence is written back beside its lock.
	if err := cl.servers[4].Client().Set(ctx, "redlockd:fence:/"+res, 10, 0).Err(); err != nil {
		t.Fatal(err)
	}
	t1, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cl.dropLock(t, res, 1, 2, 3, 4) // T's lock lives on node 0 only
	v, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.c.Release(ctx, "", res, v.Token); err != nil {
		t.Fatal(err)
	}
	cl.settle() // V's release done everywhere
	// A failed attempt of T: node 0 existing, nodes 1 and 2 silent, 3 and 4
	// down; its SETs land late on 1 and 2.
	cl.setDown(0b11110)
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok}); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("attempt with 4 down err = %v", err)
	}
	cl.setDown(0)
	for _, i := range []int{1, 2} {
		if _, err := scriptAcquire.Run(ctx, cl.servers[i].Client(), cl.c.lockKeysOf("", res).acquire(), tok, 10000, "", 0, 0, DefaultFenceIdleTTL.Milliseconds(), fenceFloor()).Result(); err != nil {
			t.Fatal(err)
		}
	}
	if got := cl.holders(t, res, tok); got != 3 {
		t.Fatalf("holders of T = %d, want 3", got)
	}
	t2, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if t2.Fence <= v.Fence {
		t.Fatalf("T's re-acquire fence %d, want above V's %d (T's first was %d)", t2.Fence, v.Fence, t1.Fence)
	}
}

// TestReleaseIdempotent: a retried release succeeds for max TTL after the
// release, even once another token took the lock; a token that never held
// it is refused, and the tombstones expire.
func TestReleaseIdempotent(t *testing.T) {
	// newCluster loaded the scripts: a lost NOSCRIPT would hide the EVAL.
	cl := newCluster(t, 5, Options{MaxTTL: shortMaxTTL, DefaultTTL: shortMaxTTL})
	ctx := t.Context()
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A release whose answer was lost: it ran on every node.
	for _, h := range cl.hooks {
		h.lost.Store(true)
	}
	if err := cl.c.Release(ctx, "", res, l.Token); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("release with lost replies err = %v", err)
	}
	cl.settle() // every node's command met the fault
	for _, h := range cl.hooks {
		h.lost.Store(false)
	}
	if got := cl.holders(t, res, ""); got != 0 {
		t.Fatalf("holders after the lost release = %d", got)
	}
	start := time.Now()
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatalf("retried release err = %v, want nil", err)
	}
	other, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: shortMaxTTL})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatalf("retried release while another holds the lock err = %v, want nil", err)
	}
	cl.settle()
	if got := cl.holders(t, res, other.Token); got != 5 {
		t.Fatalf("the retried release touched the new holder's lock: holders %d", got)
	}
	if err := cl.c.Release(ctx, "", res, NewToken()); !errors.Is(err, ErrHeldByOther) {
		t.Fatalf("release by a token that never held it err = %v, want ErrHeldByOther", err)
	}
	if err := cl.c.Release(ctx, "", res, other.Token); err != nil {
		t.Fatal(err)
	}
	// An undone attempt leaves no tombstone: its token never held the lock.
	cl.setDown(0b11100)
	tok := NewToken() + "client"
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok}); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("attempt with 3 down err = %v", err)
	}
	cl.setDown(0)
	if err := cl.c.Release(ctx, "", res, tok); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("release of an undone attempt err = %v, want ErrLockExpired", err)
	}
	// After max TTL the first token's tombstones are gone.
	time.Sleep(time.Until(start.Add(shortMaxTTL + 200*time.Millisecond)))
	if err := cl.c.Release(ctx, "", res, l.Token); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("release after max TTL err = %v, want ErrLockExpired", err)
	}
}

// TestPermitFencesUnique: acquires of one semaphore's permits in flight
// together, through two coordinators whose commands reach the nodes in
// different orders, never share a fencing token, and an acquire that starts
// after another's answer gets a greater one (see commit.lua's claim).
func TestPermitFencesUnique(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	coords := []*Coordinator{cl.c, cl.gateway(t)}
	ctx, name := t.Context(), uniq(t)
	const limit, rounds = 4, 50
	t0 := time.Now()
	var mu sync.Mutex
	var ws []checker.Window
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range limit {
			wg.Go(func() {
				<-start
				c := coords[i%2]
				sent := time.Since(t0)
				p, err := c.AcquirePermit(ctx, name, PermitOptions{Limit: limit, AcquireOptions: AcquireOptions{TTL: 5 * time.Second, Wait: 5 * time.Second}})
				if err != nil {
					t.Errorf("round %d: acquire %d: %v", round, i, err)
					return
				}
				w := checker.Window{ID: fmt.Sprintf("r%d#%d", round, i), Resource: name, Fence: p.Fence, Sent: sent, Start: time.Since(t0)}
				if err := c.ReleasePermit(ctx, "", name, p.Token); err != nil {
					t.Errorf("round %d: release %d: %v", round, i, err)
				}
				w.End = time.Since(t0) // at most limit holders: the window may reach past the release
				mu.Lock()
				ws = append(ws, w)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	// The checker's rules of a semaphore's fences: handed out once, and
	// greater than those of every grant read before the acquire was sent.
	if vs, _ := checker.Check(ws, limit); len(vs) > 0 {
		t.Fatalf("%d violations:\n%s", len(vs), checker.Report(vs, 10))
	}
}

// TestCommitClaim: commit.lua records a writer's fence only where this
// node gave it to no other token: it raises a counter below it, accepts
// the value it handed to the token itself, and refuses one it handed to
// another; a reader's fence (shared) is only recorded.
func TestCommitClaim(t *testing.T) {
	s := redistest.Start(t)
	c, ctx := s.Client(), t.Context()
	keys := []string{"l", "f", "r", "rm"}
	idle := DefaultFenceIdleTTL.Milliseconds()
	commit := func(token string, fence int64, claim int) []any {
		t.Helper()
		v, err := scriptCommit.Run(ctx, c, keys, token, fence, idle, claim).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// A holds the lock, and this node gave it 5; then 6 and 7 to others.
	c.Set(ctx, "l", "A 5 - - - ", time.Minute)
	c.Set(ctx, "f", 7, time.Hour)
	for _, tc := range []struct {
		token        string
		fence        int64
		claim        int
		state, count int64
		recorded     string
	}{
		{"A", 7, 1, -1, 7, ""},   // another token's value here
		{"A", 6, 1, -1, 7, ""},   // and so was 6
		{"A", 5, 1, 1, 7, "5"},   // A's own
		{"A", 9, 1, 1, 9, "9"},   // above the counter: raised
		{"B", 12, 1, 0, 12, "9"}, // B does not hold it: the counter is raised all the same
		{"A", 12, 0, 1, 12, "12"},
	} {
		v := commit(tc.token, tc.fence, tc.claim)
		if len(v) != 2 || v[0] != tc.state || v[1] != tc.count {
			t.Fatalf("commit %+v = %v, want {%d, %d}", tc, v, tc.state, tc.count)
		}
		if got := strings.Trim(readRecord(t, c, "l").fence, "-"); got != tc.recorded {
			t.Fatalf("commit %+v: recorded fence %q, want %q", tc, got, tc.recorded)
		}
		if ttl := c.PTTL(ctx, "f").Val(); ttl <= 0 || ttl > DefaultFenceIdleTTL {
			t.Fatalf("commit %+v: the counter's TTL is %v, want at most %v", tc, ttl, DefaultFenceIdleTTL)
		}
	}
	// A live reader whose records are gone: the record made anew expires.
	c.Set(ctx, "l", "^ - - - - ", time.Minute)
	c.ZAdd(ctx, "r", redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "R"})
	c.PExpire(ctx, "r", time.Minute)
	if v := commit("R", 12, 0); v[0] != int64(1) {
		t.Fatalf("reader's commit = %v", v)
	}
	if ttl := c.PTTL(ctx, "rm").Val(); ttl <= 0 {
		t.Fatalf("the reader's record has TTL %v: it would live forever", ttl)
	}
}

// TestFenceCounterExpires: no key lives forever: a resource's fence counter
// lives at most FenceIdleTTL on every node; once it is gone
// everywhere (idle that long, or every node restarted empty) the next
// fence is still greater than every one before.
func TestFenceCounterExpires(t *testing.T) {
	idle := 2 * time.Hour
	cl := newCluster(t, 5, Options{FenceIdleTTL: idle})
	ctx, res := t.Context(), uniq(t)
	var fences []int64
	for range 3 {
		l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(fences) > 0 && l.Fence <= fences[len(fences)-1] {
			t.Fatalf("fence %d not above %v", l.Fence, fences)
		}
		fences = append(fences, l.Fence)
		if l.Fence > 1<<53-1 {
			t.Fatalf("fence %d is not exact in a JSON number", l.Fence)
		}
		if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
			t.Fatal(err)
		}
		cl.settle()
		for i, s := range cl.servers {
			if ttl := s.Client().PTTL(ctx, "redlockd:fence:/"+res).Val(); ttl <= 0 || ttl > idle {
				t.Fatalf("node %d: the fence counter's TTL is %v, want in (0, %v]", i, ttl, idle)
			}
			// As after idle of no use: gone before the next acquire.
			s.Client().Del(ctx, "redlockd:fence:/"+res)
		}
	}
}
