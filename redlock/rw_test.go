package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var read = AcquireOptions{Mode: ModeRead}

// gateway is another coordinator over cl's nodes: a second gateway.
func (cl *cluster) gateway(t *testing.T) *Coordinator {
	t.Helper()
	var nodes []*redis.Options
	for _, s := range cl.servers {
		nodes = append(nodes, s.Options())
	}
	c, err := New(nodes, cl.c.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Warm(t.Context(), patience)
	return c
}

// waitingWriters counts the nodes where a writer waits for resource.
func (cl *cluster) waitingWriters(resource string) int {
	n := 0
	for _, s := range cl.servers {
		if k, _ := s.Client().ZCard(context.Background(), "redlockd:wwait:/"+resource).Result(); k > 0 {
			n++
		}
	}
	return n
}

// TestReadWrite: readers share the lock and get the last writer's fence,
// which extend keeps; a writer is refused while they hold it; a waiting
// writer keeps new readers out, on this gateway and on another, and is
// woken (not polled) when the last reader leaves, with a greater fence.
func TestReadWrite(t *testing.T) {
	cl := newCluster(t, 5, Options{PollInterval: time.Minute}) // no fallback poll: only wake-ups
	c, ctx, res := cl.c, t.Context(), uniq(t)
	w0, err := c.Acquire(ctx, res, AcquireOptions{})
	if err != nil || w0.Mode != ModeWrite {
		t.Fatalf("writer: %+v, %v", w0, err)
	}
	if _, err := c.Acquire(ctx, res, read); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("reader while a writer holds: %v", err)
	}
	if err := c.Release(ctx, "", res, w0.Token); err != nil {
		t.Fatal(err)
	}
	var rs []Lock
	for _, owner := range []string{"r1", "r2"} {
		r, err := c.Acquire(ctx, res, AcquireOptions{Mode: ModeRead, Owner: owner, TTL: 10 * time.Second})
		if err != nil || r.Mode != ModeRead || r.Fence != w0.Fence {
			t.Fatalf("reader %s: %+v, %v; want the last writer's fence %d", owner, r, err, w0.Fence)
		}
		rs = append(rs, r)
	}
	info, err := c.Inspect(ctx, "", res)
	if err != nil || info.Mode != ModeRead || info.Readers != 2 || info.Fence != w0.Fence || info.HeldNodes < c.Quorum() {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
	var he *HeldError
	if _, err := c.Acquire(ctx, res, AcquireOptions{}); !errors.As(err, &he) || he.Remaining <= 0 {
		t.Fatalf("writer while readers hold: %v", err)
	}

	got := make(chan Lock, 1)
	go func() {
		l, err := c.Acquire(context.Background(), res, AcquireOptions{Wait: 20 * time.Second, Owner: "w1"})
		if err != nil {
			t.Errorf("waiting writer: %v", err)
		}
		got <- l
	}()
	eventually(t, patience, "the writer waiting on a quorum", func() bool { return cl.waitingWriters(res) >= c.Quorum() })
	if _, err := c.Acquire(ctx, res, read); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("new reader behind a waiting writer: %v", err)
	}
	if _, err := cl.gateway(t).Acquire(ctx, res, read); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("new reader on another gateway while a writer waits: %v", err)
	}
	// A reader that holds already may still re-acquire and extend.
	if l, err := c.Extend(ctx, "", res, rs[0].Token, 0); err != nil || l.Fence != w0.Fence || l.Mode != ModeRead {
		t.Fatalf("reader's extend: %+v, %v", l, err)
	}
	start := time.Now()
	for _, r := range rs {
		if err := c.Release(ctx, "", res, r.Token); err != nil {
			t.Fatal(err)
		}
	}
	w1 := <-got
	if d := time.Since(start); d > patience {
		t.Fatalf("writer served after %v: polled, not woken", d)
	}
	if w1.Fence <= w0.Fence || w1.Owner != "w1" {
		t.Fatalf("writer after readers: %+v; want a fence above %d", w1, w0.Fence)
	}
	if info, err := c.Inspect(ctx, "", res); err != nil || info.Mode != ModeWrite || info.Readers != 0 || info.Owner != "w1" {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
	if err := c.Release(ctx, "", res, w1.Token); err != nil {
		t.Fatal(err)
	}
	// The writer left wwait when it got the lock: readers enter at once.
	if r, err := cl.gateway(t).Acquire(ctx, res, read); err != nil || r.Fence != w1.Fence {
		t.Fatalf("reader after the writer: %+v, %v; want fence %d", r, err, w1.Fence)
	}
}

// TestReadersAdmittedTogether: readers waiting behind a writer all get in
// when it leaves, woken by its release.
func TestReadersAdmittedTogether(t *testing.T) {
	cl := newCluster(t, 3, Options{PollInterval: time.Minute})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	w, err := c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Lock, 3)
	for i := range 3 {
		go func() {
			l, err := c.Acquire(context.Background(), res, AcquireOptions{Mode: ModeRead, Wait: 20 * time.Second, TTL: 20 * time.Second})
			if err != nil {
				t.Errorf("reader %d: %v", i, err)
			}
			got <- l
		}()
	}
	eventually(t, patience, "three waiters", func() bool { return c.Stats().Waiting == 3 })
	start := time.Now()
	if err := c.Release(ctx, "", res, w.Token); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r := <-got; r.Fence != w.Fence {
			t.Fatalf("reader %+v; want fence %d", r, w.Fence)
		}
	}
	if d := time.Since(start); d > patience {
		t.Fatalf("readers served after %v: polled, not woken", d)
	}
	if info, err := c.Inspect(ctx, "", res); err != nil || info.Readers != 3 {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
}

// TestReaderFence: a reader's fence is the greatest counter of its quorum,
// written back when the nodes differ, so that extend keeps it and every
// later writer gets a greater one, even without the node that had it.
func TestReaderFence(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	for i, s := range cl.servers {
		v := 5
		if i == 0 {
			v = 100 // the only node that saw the last writer's fence
		}
		if err := s.Client().Set(ctx, "redlockd:fence:/"+res, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.Acquire(ctx, res, read)
	if err != nil || (r.Fence != 100 && r.Fence != 5) {
		t.Fatalf("reader: %+v, %v", r, err)
	}
	if l, err := c.Extend(ctx, "", res, r.Token, 0); err != nil || l.Fence != r.Fence {
		t.Fatalf("extend: %+v, %v; want fence %d", l, err, r.Fence)
	}
	if err := c.Release(ctx, "", res, r.Token); err != nil {
		t.Fatal(err)
	}
	cl.setDown(1)
	w, err := c.Acquire(ctx, res, AcquireOptions{})
	if err != nil || w.Fence <= r.Fence {
		t.Fatalf("writer after the reader: %+v, %v; want a fence above %d", w, err, r.Fence)
	}
}

// TestReaderIdempotent: a reader's chosen token re-acquires with the same
// fence and counts once.
func TestReaderIdempotent(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	o := AcquireOptions{Mode: ModeRead, Token: NewToken() + "reader"}
	r1, err := c.Acquire(ctx, res, o)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Acquire(ctx, res, o)
	if err != nil || r2.Fence != r1.Fence || r2.Token != r1.Token {
		t.Fatalf("re-acquire: %+v, %v; want %+v", r2, err, r1)
	}
	if info, err := c.Inspect(ctx, "", res); err != nil || info.Readers != 1 {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
	if err := c.Release(ctx, "", res, o.Token); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "", res, o.Token); err != nil {
		t.Fatalf("retried release: %v", err)
	}
	if _, err := c.Inspect(ctx, "", res); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("inspect after release: %v", err)
	}
	cl.settle()
	for i, s := range cl.servers {
		if n, err := s.Client().Exists(ctx, "redlockd:readers:/"+res, "redlockd:rmeta:/"+res).Result(); err != nil || n != 0 {
			t.Fatalf("node %d: %d readers keys left after the last reader's release, %v", i, n, err)
		}
	}
}

// TestReaderExpired: a reader's extend and release after its TTL ran out
// fail as ErrLockExpired, and a writer gets in.
func TestReaderExpired(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	const ttl = 5 * MinTTL // valid although the acquire is slow on a loaded machine
	r, err := c.Acquire(ctx, res, AcquireOptions{Mode: ModeRead, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // time is the subject here
	if _, err := c.Extend(ctx, "", res, r.Token, 0); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("extend after expiry: %v", err)
	}
	if err := c.Release(ctx, "", res, r.Token); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("release after expiry: %v", err)
	}
	// A reader that expired while another holds leaves no records behind, and
	// leaves the readers.
	other, err := c.Acquire(ctx, res, AcquireOptions{Mode: ModeRead, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err = c.Acquire(ctx, res, AcquireOptions{Mode: ModeRead, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl)
	third, err := c.Acquire(ctx, res, read)
	if err != nil {
		t.Fatal(err)
	}
	cl.settle()
	for i, s := range cl.servers {
		f, err := s.Client().HKeys(ctx, "redlockd:rmeta:/"+res).Result()
		if err != nil || slices.ContainsFunc(f, func(k string) bool { return strings.HasPrefix(k, r.Token) }) {
			t.Fatalf("node %d: records %v, %v; want none of the expired reader's", i, f, err)
		}
		if err := s.Client().ZScore(ctx, "redlockd:readers:/"+res, r.Token).Err(); err != redis.Nil {
			t.Fatalf("node %d: the expired reader among the readers (%v)", i, err)
		}
	}
	for _, l := range []Lock{other, third} {
		if err := c.Release(ctx, "", res, l.Token); err != nil {
			t.Fatal(err)
		}
	}
	if w, err := c.Acquire(ctx, res, AcquireOptions{}); err != nil || w.Fence <= r.Fence {
		t.Fatalf("writer after expiry: %+v, %v", w, err)
	}
}

// TestReadWriteNodesDown: with 2 of 5 nodes down readers and writers work
// as with all up; a reader refused by a quorum (a writer holds it there)
// leaves no grant where it was granted.
func TestReadWriteNodesDown(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	cl.setDown(0b00011)
	r1, err := c.Acquire(ctx, res, read)
	if err != nil || r1.Locked != 3 {
		t.Fatalf("reader: %+v, %v", r1, err)
	}
	r2, err := c.Acquire(ctx, res, read)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, res, AcquireOptions{}); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("writer while readers hold: %v", err)
	}
	if info, err := c.Inspect(ctx, "", res); err != nil || info.Readers != 2 || info.HeldNodes != 3 {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
	if _, err := c.Extend(ctx, "", res, r1.Token, 0); err != nil {
		t.Fatal(err)
	}
	for _, r := range []Lock{r1, r2} {
		if err := c.Release(ctx, "", res, r.Token); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Acquire(ctx, res, AcquireOptions{TTL: 10 * time.Second})
	if err != nil || w.Fence <= r1.Fence {
		t.Fatalf("writer: %+v, %v", w, err)
	}

	// The writer holds nodes 2-4; nodes 0 and 1 come back free: a reader
	// is granted there only, refused by the quorum, and undone.
	cl.setDown(0)
	if _, err := c.Acquire(ctx, res, read); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("reader while the writer holds: %v", err)
	}
	cl.settle()
	for i, s := range cl.servers {
		if n, err := s.Client().ZCard(ctx, "redlockd:readers:/"+res).Result(); err != nil || n != 0 {
			t.Fatalf("node %d: %d readers left, %v", i, n, err)
		}
	}
}

// TestModeInvalid: an unknown mode, or a semaphore's read mode, is ErrInvalid.
func TestModeInvalid(t *testing.T) {
	cl := newCluster(t, 1, Options{})
	ctx := t.Context()
	if _, err := cl.c.Acquire(ctx, "x", AcquireOptions{Mode: "shared"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown mode: %v", err)
	}
	if _, err := cl.c.AcquirePermit(ctx, "x", permitOpts(2, read)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("semaphore read mode: %v", err)
	}
}

// TestReaderExtendKeepsItsKeys: a reader extended past the TTL it was
// granted keeps its keys (the readers set, their records and the readers'
// marker in the lock key) at least as long as its new TTL on every node, so
// none expires under it.
func TestReaderExtendKeepsItsKeys(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	c, ctx, res := cl.c, t.Context(), uniq(t)
	r, err := c.Acquire(ctx, res, AcquireOptions{Mode: ModeRead, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Extend(ctx, "", res, r.Token, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	cl.settle()
	k := c.lockKeysOf("", res)
	for i, s := range cl.servers {
		for _, key := range []string{k.Lock, k.Readers, k.RMeta} {
			if ttl := s.Client().PTTL(ctx, key).Val(); ttl < 15*time.Second {
				t.Errorf("node %d: %s lives %v more, want the extended reader's 20s", i, key, ttl)
			}
		}
	}
}

// TestReaderDropsExpiredWaitingWriters: a reader is not kept out by waiting
// writers whose waits ended (their entries' expiry passed), and drops them.
func TestReaderDropsExpiredWaitingWriters(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	ctx, res := t.Context(), uniq(t)
	key := "redlockd:wwait:/" + res
	for _, s := range cl.servers {
		s.Client().ZAdd(ctx, key, redis.Z{Score: 1, Member: NewToken()}) // expired in 1970
		s.Client().Expire(ctx, key, time.Minute)
	}
	if _, err := cl.c.Acquire(ctx, res, read); err != nil {
		t.Fatal(err)
	}
	cl.settle()
	if n := cl.waitingWriters(res); n != 0 {
		t.Fatalf("expired waiting writers left on %d nodes", n)
	}
}

// TestFirstReaderIgnoresLeftovers: the first reader of a lock (no readers'
// marker in its lock key) starts the readers' keys anew, whatever they held:
// a reader left in them (keys that outlived the marker, which no script
// leaves) is not one of its readers.
func TestFirstReaderIgnoresLeftovers(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	ctx, res := t.Context(), uniq(t)
	ghost, later := NewToken(), float64(time.Now().Add(time.Hour).UnixMilli())
	for _, s := range cl.servers {
		s.Client().ZAdd(ctx, "redlockd:readers:/"+res, redis.Z{Score: later, Member: ghost})
		s.Client().Expire(ctx, "redlockd:readers:/"+res, time.Minute)
	}
	if _, err := cl.c.Acquire(ctx, res, read); err != nil {
		t.Fatal(err)
	}
	if info, err := cl.c.Inspect(ctx, "", res); err != nil || info.Readers != 1 {
		t.Fatalf("inspect: %+v, %v; want the one reader", info, err)
	}
}

// TestReaderAndPermitKeysHaveATTL: the keys that a reader's acquire writes
// all have a TTL whichever way it goes (the first reader, which makes the
// readers' keys anew; the same token again; a reader joining readers), and
// so do a permit's after an extend (tests/keys_test.go checks every kind's
// first acquire and release through a gateway).
func TestReaderAndPermitKeysHaveATTL(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	ctx, res := t.Context(), uniq(t)
	check := func(when string) {
		t.Helper()
		cl.settle()
		for i, s := range cl.servers {
			keys, err := s.Client().Keys(ctx, "redlockd:*"+res+"*").Result()
			if err != nil || len(keys) == 0 {
				t.Fatalf("%s, node %d: keys %v, %v", when, i, keys, err)
			}
			for _, k := range keys {
				if ttl := s.Client().PTTL(ctx, k).Val(); ttl <= 0 {
					t.Errorf("%s, node %d: %s expires in %v", when, i, k, ttl)
				}
			}
		}
	}
	o := AcquireOptions{Mode: ModeRead, Token: NewToken()}
	for _, when := range []string{"the first reader", "the same token again"} {
		if _, err := cl.c.Acquire(ctx, res, o); err != nil {
			t.Fatal(err)
		}
		check(when)
	}
	if _, err := cl.c.Acquire(ctx, res, read); err != nil {
		t.Fatal(err)
	}
	check("a reader joining readers")
	p, err := cl.c.AcquirePermit(ctx, res+"-sem", permitOpts(2, AcquireOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.c.ExtendPermit(ctx, "", res+"-sem", p.Token, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	check("a permit extended")
}
