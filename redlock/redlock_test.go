package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/internal/redistest"
)

var keySeq atomic.Int64

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // go-redis logs every failed dial of a killed node
	os.Exit(m.Run())
}

// uniq returns a resource name unique to this test run.
func uniq(t *testing.T) string {
	return fmt.Sprintf("t-%d-%d", time.Now().UnixNano()%1e9, keySeq.Add(1))
}

// downHook fails every command on a node while down is set: a fault
// injected in front of a real client.
type downHook struct {
	down   atomic.Bool            // fail every command without sending it
	lost   atomic.Bool            // send every command, then fail it: its reply is lost
	refuse atomic.Pointer[string] // send every command, then fail it with this error reply
	delay  atomic.Int64           // wait this long (ns) before sending each command
}

var errInjected = errors.New("injected: node down")

// redisError is an error reply, as go-redis reports one (a redis.Error).
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// after is the error that replaces a sent command's reply, if any.
func (h *downHook) after() error {
	if h.lost.Load() {
		return errInjected
	}
	if r := h.refuse.Load(); r != nil {
		return redisError(*r)
	}
	return nil
}

func (h *downHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *downHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.down.Load() {
			cmd.SetErr(errInjected)
			return errInjected
		}
		time.Sleep(time.Duration(h.delay.Load()))
		err := next(ctx, cmd)
		if e := h.after(); e != nil {
			cmd.SetErr(e)
			return e
		}
		return err
	}
}
func (h *downHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.down.Load() {
			return errInjected
		}
		err := next(ctx, cmds)
		if e := h.after(); e != nil {
			for _, cmd := range cmds {
				cmd.SetErr(e)
			}
			return e
		}
		return err
	}
}

// The tests' clocks. A test whose subject is not time or a slow node
// never meets a timeout on a loaded machine: its coordinator's node timeout
// is testNodeTimeout, which a starved process meets, and it awaits events
// for up to patience. A test whose subject is a node that does not answer
// in time sets its own node timeout and derives its fault from it.
const (
	testNodeTimeout = 2 * time.Second
	patience        = 10 * time.Second
	// shortMaxTTL is the max TTL (and default TTL, which must exceed the
	// node timeout) of the tests that wait for it to pass: a restart
	// quarantine, or a release's tombstones.
	shortMaxTTL = testNodeTimeout + time.Second
)

type cluster struct {
	servers []*redistest.Server
	c       *Coordinator
	hooks   []*downHook
}

// newCluster starts n redis-servers and a coordinator over them, with
// node timeout testNodeTimeout unless opts sets one, and restart quarantine
// off (fresh servers would not vote for max TTL) unless quarantine is set
// (then opts.Quarantine's, auto by default).
func newCluster(t testing.TB, n int, opts Options, quarantine ...bool) *cluster {
	t.Helper()
	opts.NodeTimeout = cmp.Or(opts.NodeTimeout, testNodeTimeout)
	if len(quarantine) == 0 || !quarantine[0] {
		opts.Quarantine = QuarantineOff
	}
	cl := &cluster{servers: redistest.Cluster(t, n)}
	var nodes []*redis.Options
	for _, s := range cl.servers {
		nodes = append(nodes, s.Options())
	}
	c, err := New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Warm(t.Context(), patience) // scripts loaded: no NOSCRIPT fallback unless a test flushes them
	for _, n := range c.nodes {
		h := &downHook{}
		n.client.AddHook(h) // the round reads the injected fault
		cl.hooks = append(cl.hooks, h)
	}
	cl.c = c
	return cl
}

// settle waits until every command sent to the nodes so far has its answer
// (a round is decided at the quorum, the rest answer later) and the
// background work on the late answers is over: a PING through each node's
// automatic pipeline, one ordered stream, comes after them.
func (cl *cluster) settle() {
	for _, n := range cl.c.nodes {
		if n.pipe != nil {
			_ = n.pipe.Ping(context.Background()).Err()
		}
	}
	cl.c.bg.Wait()
}

// setDown marks the nodes in mask as down (bit i = node i), once the
// commands sent so far have their answers (see settle): a round decided at
// the quorum leaves some in flight, and they meet the faults they were sent
// under.
func (cl *cluster) setDown(mask int) {
	cl.settle()
	for i, h := range cl.hooks {
		h.down.Store(mask&(1<<i) != 0)
	}
}

// holders counts nodes whose lock key holds token (any token if token is ""),
// once every command sent so far has its answer (see settle).
func (cl *cluster) holders(t *testing.T, resource, token string) int {
	t.Helper()
	cl.settle()
	n := 0
	for _, s := range cl.servers {
		if s.PID() == 0 {
			continue
		}
		h := holderAt(t, s.Client(), "redlockd:lock:/"+resource)
		if h != "" && (token == "" || h == token) {
			n++
		}
	}
	return n
}

func TestAcquireRelease(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 5 * time.Second, Owner: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Token) != 22 || l.Locked < 3 || l.Quorum != 3 || l.Nodes != 5 || l.Fence < 1 {
		t.Fatalf("lock = %+v", l)
	}
	if maxV := 5*time.Second - 50*time.Millisecond - 2*time.Millisecond; l.Validity <= 0 || l.Validity > maxV {
		t.Fatalf("validity %v not in (0, %v]", l.Validity, maxV)
	}
	if got := cl.holders(t, res, l.Token); got != 5 {
		t.Fatalf("holders = %d, want 5", got)
	}

	_, err = cl.c.Acquire(ctx, res, AcquireOptions{})
	var he *HeldError
	if !errors.Is(err, ErrLockHeld) || !errors.As(err, &he) {
		t.Fatalf("second acquire err = %v, want ErrLockHeld", err)
	}
	if he.Remaining <= 0 || he.Remaining > 5*time.Second {
		t.Fatalf("remaining hint = %v", he.Remaining)
	}

	info, err := cl.c.Inspect(ctx, "", res)
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != "job-1" || info.Fence != l.Fence || info.HeldNodes < 3 || info.Remaining <= 0 {
		t.Fatalf("info = %+v", info)
	}

	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatal(err)
	}
	if got := cl.holders(t, res, l.Token); got != 0 {
		t.Fatalf("holders after release = %d", got)
	}
	// Release is idempotent: a retry with the token that released it
	// succeeds again; a token that never held it is told it does not own it.
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatalf("second release err = %v, want nil", err)
	}
	if err := cl.c.Release(ctx, "", res, NewToken()); !errors.Is(err, ErrLockExpired) || !errors.Is(err, ErrNotOwner) {
		t.Fatalf("release with another token err = %v, want ErrLockExpired", err)
	}
	if _, err := cl.c.Inspect(ctx, "", res); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("inspect free err = %v", err)
	}
	l2, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence <= l.Fence {
		t.Fatalf("fence %d not above %d", l2.Fence, l.Fence)
	}
	// The old holder's retried release succeeds (it did release the lock)
	// and leaves the new holder's lock alone; a stranger's is refused.
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatalf("retried release by old holder err = %v, want nil", err)
	}
	if err := cl.c.Release(ctx, "", res, NewToken()); !errors.Is(err, ErrHeldByOther) {
		t.Fatalf("release by a stranger err = %v, want ErrHeldByOther", err)
	}
	if got := cl.holders(t, res, l2.Token); got != 5 {
		t.Fatalf("new holder lost its lock: holders = %d", got)
	}
}

func TestExpiry(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	ctx := t.Context()
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the keys to expire on every node: time is the subject here.
	time.Sleep(400 * time.Millisecond)
	if _, err := cl.c.Extend(ctx, "", res, l.Token, 0); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("extend after expiry err = %v", err)
	}
	l2, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatalf("acquire after expiry: %v", err)
	}
	if l2.Fence <= l.Fence {
		t.Fatalf("fence %d not above %d", l2.Fence, l.Fence)
	}
}

func TestExtend(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	// Extended at once, the lock outlives its first TTL (time is the
	// subject: its keys would expire after ttl).
	const ttl = 2 * time.Second
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: ttl, Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := cl.c.Extend(ctx, "", res, l.Token, ttl+patience)
	if err != nil {
		t.Fatalf("extend: %v", err)
	}
	if e.Token != l.Token || e.Fence != l.Fence || e.Owner != "o" || e.Locked < 3 || e.Validity <= ttl {
		t.Fatalf("extended = %+v, lock = %+v", e, l)
	}
	time.Sleep(ttl + ttl/4)
	e, err = cl.c.Extend(ctx, "", res, l.Token, 0)
	if err != nil || e.Fence != l.Fence || e.Locked < 3 {
		t.Fatalf("extend past the first TTL = %+v, %v", e, err)
	}
	// A node that lost the key (restarted empty) gets it back while the quorum holds.
	c0 := cl.servers[0].Client()
	if err := c0.Del(ctx, "redlockd:lock:/"+res).Err(); err != nil {
		t.Fatal(err)
	}
	e, err = cl.c.Extend(ctx, "", res, l.Token, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Re-asserted in the round, or in the background when node 0 answered late.
	if e.Locked < 3 {
		t.Fatalf("extend = %+v", e)
	}
	eventually(t, patience, "the re-assert", func() bool { return cl.holders(t, res, l.Token) == 5 })
	if f := readRecord(t, c0, "redlockd:lock:/"+res).fence; f != strconv.FormatInt(l.Fence, 10) {
		t.Fatalf("re-asserted fence = %s, want %d", f, l.Fence)
	}
	// It never resurrects a lock lost on a quorum.
	for _, s := range cl.servers[:3] {
		s.Client().Del(ctx, "redlockd:lock:/"+res)
	}
	if _, err := cl.c.Extend(ctx, "", res, l.Token, 0); !errors.Is(err, ErrLockExpired) {
		t.Fatalf("extend of a lost lock err = %v", err)
	}
	if got := cl.holders(t, res, l.Token); got != 2 {
		t.Fatalf("lost lock resurrected: holders = %d", got)
	}
	// Held by another token on a quorum.
	res2 := uniq(t)
	l2, err := cl.c.Acquire(ctx, res2, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.c.Extend(ctx, "", res2, NewToken(), 0); !errors.Is(err, ErrHeldByOther) {
		t.Fatalf("extend with wrong token err = %v", err)
	}
	if got := cl.holders(t, res2, l2.Token); got != 5 {
		t.Fatalf("wrong-token extend changed the lock: holders = %d", got)
	}
}

func TestIdempotentAcquire(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	tok := NewToken() + "client"
	l1, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok, TTL: 50 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token != tok || l2.Fence != l1.Fence {
		t.Fatalf("re-acquire = %+v, first = %+v", l2, l1)
	}
	cl.settle()
	for i, s := range cl.servers {
		if pttl, _ := s.Client().PTTL(ctx, "redlockd:lock:/"+res).Result(); pttl <= 5*time.Second {
			t.Fatalf("node %d: TTL not reset to the re-acquire's: %v", i, pttl)
		}
	}
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: NewToken() + "other"}); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("other token err = %v", err)
	}
	// A failed re-acquire with the caller's token must not release the lock it holds.
	cl.setDown(0b00111)
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: tok}); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("re-acquire with 3 down err = %v", err)
	}
	cl.setDown(0)
	if got := cl.holders(t, res, tok); got != 5 {
		t.Fatalf("failed re-acquire released the held lock: holders = %d", got)
	}
}

// TestQuorumMasks tries every subset of failed nodes for N = 3 and 5.
func TestQuorumMasks(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cl := newCluster(t, n, Options{})
			ctx := t.Context()
			quorum := n/2 + 1
			for mask := range 1 << n {
				up := n - bits.OnesCount(uint(mask))
				res := uniq(t)
				cl.setDown(mask)
				l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 10 * time.Second})
				if up >= quorum {
					if err != nil || l.Locked < quorum || l.Locked > up {
						t.Fatalf("mask %b: acquire = %+v, %v; want locked %d..%d", mask, l, err, quorum, up)
					}
				} else {
					if !errors.Is(err, ErrQuorumUnavailable) || errors.Is(err, ErrLockHeld) {
						t.Fatalf("mask %b: acquire err = %v, want ErrQuorumUnavailable", mask, err)
					}
					var ne *NodeError
					if !errors.As(err, &ne) || !errors.Is(err, errInjected) {
						t.Fatalf("mask %b: err %v lacks the node errors", mask, err)
					}
					// The undo runs in the background (last round); nodes that
					// were down never got the key.
					eventually(t, patience, "the undo", func() bool { return cl.holders(t, res, "") == 0 })
					cl.setDown(0)
					continue
				}
				// Release with the same nodes down.
				err = cl.c.Release(ctx, "", res, l.Token)
				if err != nil {
					t.Fatalf("mask %b: release: %v", mask, err)
				}
				// Hold the lock on all nodes, then take nodes down: release
				// answers 503 when the silent nodes could hide a quorum.
				cl.setDown(0)
				l, err = cl.c.Acquire(ctx, res, AcquireOptions{TTL: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				cl.setDown(mask)
				_, err = cl.c.Extend(ctx, "", res, l.Token, 0)
				if up >= quorum != (err == nil) {
					t.Fatalf("mask %b: extend err = %v", mask, err)
				}
				_, err = cl.c.Inspect(ctx, "", res)
				if up >= quorum != (err == nil) {
					t.Fatalf("mask %b: inspect err = %v", mask, err)
				}
				cl.setDown(0)
				if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
					t.Fatal(err)
				}
			}
			// Release/extend outcome table for a lock held on all nodes.
			for mask := range 1 << n {
				down := 0
				for i := range n {
					down += mask >> i & 1
				}
				res := uniq(t)
				cl.setDown(0)
				l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
				if err != nil {
					t.Fatal(err)
				}
				cl.setDown(mask)
				err = cl.c.Release(ctx, "", res, l.Token)
				if matched := n - down; matched >= quorum {
					if err != nil {
						t.Fatalf("mask %b: release err = %v", mask, err)
					}
				} else if !errors.Is(err, ErrQuorumUnavailable) {
					t.Fatalf("mask %b: release err = %v, want ErrQuorumUnavailable", mask, err)
				}
			}
			cl.setDown(0)
		})
	}
}

// TestHeldVersusUnavailable: a refusal by a quorum is ErrLockHeld; a split
// where silent nodes could still make a quorum is ErrQuorumUnavailable.
func TestHeldVersusUnavailable(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	other := NewToken()
	set := func(res string, idx ...int) {
		for _, i := range idx {
			if err := cl.servers[i].Client().Set(ctx, "redlockd:lock:/"+res, other, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Held by another token on 2 nodes: 3 free nodes are a quorum.
	res := uniq(t)
	set(res, 0, 1)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil || l.Locked != 3 {
		t.Fatalf("acquire with 2 foreign = %+v, %v", l, err)
	}
	// Held on 3 nodes: lock held; the 2 free nodes must not keep our key.
	res = uniq(t)
	set(res, 0, 1, 2)
	_, err = cl.c.Acquire(ctx, res, AcquireOptions{})
	var he *HeldError
	if !errors.As(err, &he) || he.Remaining < time.Minute-patience {
		t.Fatalf("acquire with 3 foreign err = %v (%+v)", err, he)
	}
	// The undo of a last round runs in the background: wait for it.
	eventually(t, patience, "the failed acquire's keys to be undone", func() bool {
		for _, s := range cl.servers[3:] {
			if holderAt(t, s.Client(), "redlockd:lock:/"+res) != "" {
				return false
			}
		}
		return true
	})
	// Held on 2, one node down: 2 free + 1 silent could be a quorum, so unknown.
	res = uniq(t)
	set(res, 0, 1)
	cl.setDown(1 << 4)
	_, err = cl.c.Acquire(ctx, res, AcquireOptions{})
	cl.setDown(0)
	if !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("split vote err = %v, want ErrQuorumUnavailable", err)
	}
	// Held on 3, node 4 down: 1 free + 1 silent < quorum, so held.
	res = uniq(t)
	set(res, 0, 1, 2)
	cl.setDown(1 << 4)
	_, err = cl.c.Acquire(ctx, res, AcquireOptions{})
	cl.setDown(0)
	if !errors.Is(err, ErrLockHeld) {
		t.Fatalf("held with one down err = %v", err)
	}
}

func TestWait(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A bounded wait on a held lock gives up after the wait, and its last
	// round (time is the subject).
	const wait = 200 * time.Millisecond
	start := time.Now()
	_, err = cl.c.Acquire(ctx, res, AcquireOptions{Wait: wait})
	if el := time.Since(start); !errors.Is(err, ErrLockHeld) || el < wait || el > wait+2*testNodeTimeout {
		t.Fatalf("wait %v: err = %v after %v", wait, err, el)
	}
	// A cancelled wait reports both causes.
	cctx, cancel := context.WithCancel(ctx)
	held := cl.c.Stats().Held
	go func() {
		eventually(t, patience, "the waiter's first round to be refused", func() bool {
			return cl.c.Stats().Waiting == 1 && cl.c.Stats().Held > held
		})
		cancel()
	}()
	_, err = cl.c.Acquire(cctx, res, AcquireOptions{Wait: 2 * patience})
	cancel()
	if !errors.Is(err, ErrLockHeld) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait err = %v", err)
	}
	// A waiter gets the lock once the holder releases it.
	released := make(chan struct{})
	go func() {
		defer close(released)
		eventually(t, patience, "the waiter to wait", func() bool { return cl.c.Stats().Waiting == 1 })
		if err := cl.c.Release(context.Background(), "", res, l.Token); err != nil {
			t.Error(err)
		}
	}()
	l2, err := cl.c.Acquire(ctx, res, AcquireOptions{Wait: 2 * patience})
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	<-released
	if l2.Fence <= l.Fence {
		t.Fatalf("fence %d not above %d", l2.Fence, l.Fence)
	}
	// A waiter gets a lock whose holder vanished once its TTL runs out, not
	// at the fallback poll (every 30s by default).
	res = uniq(t)
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Wait: 2 * patience}); err != nil {
		t.Fatalf("waiter after expiry: %v", err)
	}
	if el := time.Since(start); el > patience {
		t.Fatalf("waiter took %v to get an expired lock", el)
	}
}

// TestFenceSurvivesRestart: fencing tokens keep increasing when any one
// node of five restarts with empty memory between two acquisitions.
func TestFenceSurvivesRestart(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	var last int64
	for i := range 10 {
		l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if l.Fence <= last {
			t.Fatalf("round %d: fence %d not above %d", i, l.Fence, last)
		}
		last = l.Fence
		if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
			t.Fatal(err)
		}
		cl.servers[i%5].Restart()
	}
	// Skewed counters (one node far ahead, as after naive per-node INCR)
	// still give a fence above every one handed out: the greatest of the
	// quorum that decided the round (1001 if node 2 was in it).
	if err := cl.servers[2].Client().Set(ctx, "redlockd:fence:/"+res, 1000, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil || l.Fence <= last {
		t.Fatalf("acquire = %+v, %v; want a fence above %d", l, err, last)
	}
	last = l.Fence
	cl.c.Release(ctx, "", res, l.Token)
	cl.servers[2].Restart()
	l, err = cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil || l.Fence <= last {
		t.Fatalf("after the ahead node restarted: %+v, %v", l, err)
	}
}

// TestNodeKilled kills real processes: 2 of 5 still lock, 3 of 5 give
// ErrQuorumUnavailable at once: a refused connection is no wait for the
// node timeout.
func TestNodeKilled(t *testing.T) {
	const nodeTimeout = 4 * testNodeTimeout
	cl := newCluster(t, 5, Options{NodeTimeout: nodeTimeout, DefaultTTL: 2 * nodeTimeout})
	ctx := t.Context()
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl.servers[0].Kill()
	cl.servers[1].Kill()
	e, err := cl.c.Extend(ctx, "", res, l.Token, 0)
	if err != nil || e.Locked != 3 {
		t.Fatalf("extend with 2 killed = %+v, %v", e, err)
	}
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatal(err)
	}
	l, err = cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil || l.Locked != 3 {
		t.Fatalf("acquire with 2 killed = %+v, %v", l, err)
	}
	cl.servers[2].Kill()
	start := time.Now()
	_, err = cl.c.Acquire(ctx, uniq(t), AcquireOptions{})
	if el := time.Since(start); !errors.Is(err, ErrQuorumUnavailable) || el >= nodeTimeout/2 {
		t.Fatalf("acquire with 3 killed: %v after %v (node timeout %v)", err, el, nodeTimeout)
	}
	if err := cl.c.Release(ctx, "", res, l.Token); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("release with 3 killed err = %v", err)
	}
	st := cl.c.Status(ctx)
	if st[0].Up || st[2].Up || !st[3].Up || st[0].Addr != cl.servers[0].Addr() {
		t.Fatalf("status = %+v", st)
	}
}

// TestPausedNode: a SIGSTOPped node never costs a wrong answer, nor a wait
// for it: the round is decided by the live nodes, long before the node
// timeout.
func TestPausedNode(t *testing.T) {
	const nodeTimeout = 4 * testNodeTimeout
	cl := newCluster(t, 5, Options{NodeTimeout: nodeTimeout, DefaultTTL: 2 * nodeTimeout})
	ctx := t.Context()
	cl.servers[4].Pause()
	defer cl.servers[4].Resume()
	for range 3 {
		res := uniq(t)
		start := time.Now()
		l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
		if el := time.Since(start); err != nil || l.Locked < 3 || el >= nodeTimeout/2 {
			t.Fatalf("acquire with a paused node = %+v, %v after %v (node timeout %v)", l, err, el, nodeTimeout)
		}
		if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNamespaces(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	ctx := t.Context()
	res := uniq(t)
	a, err := cl.c.Acquire(ctx, res, AcquireOptions{Namespace: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cl.c.Acquire(ctx, res, AcquireOptions{Namespace: "b"})
	if err != nil {
		t.Fatalf("same name in another namespace: %v", err)
	}
	if err := cl.c.Release(ctx, "b", res, a.Token); !errors.Is(err, ErrHeldByOther) {
		t.Fatalf("cross-namespace release err = %v", err)
	}
	if err := cl.c.Release(ctx, "a", res, a.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.c.Inspect(ctx, "b", res); err != nil {
		t.Fatalf("b lost its lock: %v", err)
	}
	_ = b
}

func TestInvalid(t *testing.T) {
	cl := newCluster(t, 1, Options{MaxTTL: shortMaxTTL, DefaultTTL: shortMaxTTL, MaxWait: shortMaxTTL})
	ctx := t.Context()
	tok := NewToken()
	for name, err := range map[string]error{
		"empty name":    func() error { _, err := cl.c.Acquire(ctx, "", AcquireOptions{}); return err }(),
		"slash":         func() error { _, err := cl.c.Acquire(ctx, "a/b", AcquireOptions{}); return err }(),
		"long name":     func() error { _, err := cl.c.Acquire(ctx, string(make([]byte, 201)), AcquireOptions{}); return err }(),
		"ttl low":       func() error { _, err := cl.c.Acquire(ctx, "x", AcquireOptions{TTL: 99 * time.Millisecond}); return err }(),
		"ttl high":      func() error { _, err := cl.c.Acquire(ctx, "x", AcquireOptions{TTL: 2 * shortMaxTTL}); return err }(),
		"wait high":     func() error { _, err := cl.c.Acquire(ctx, "x", AcquireOptions{Wait: 2 * shortMaxTTL}); return err }(),
		"wait negative": func() error { _, err := cl.c.Acquire(ctx, "x", AcquireOptions{Wait: -1}); return err }(),
		"short token":   func() error { _, err := cl.c.Acquire(ctx, "x", AcquireOptions{Token: "abc"}); return err }(),
		"owner": func() error {
			_, err := cl.c.Acquire(ctx, "x", AcquireOptions{Owner: string(make([]byte, 257))})
			return err
		}(),
		"namespace":     func() error { _, err := cl.c.Acquire(ctx, "x", AcquireOptions{Namespace: "a/b"}); return err }(),
		"release token": cl.c.Release(ctx, "", "x", "bad token!"),
		"extend ttl":    func() error { _, err := cl.c.Extend(ctx, "", "x", tok, 2*shortMaxTTL); return err }(),
		"inspect name":  func() error { _, err := cl.c.Inspect(ctx, "", "a b"); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if keys, _ := cl.servers[0].Client().Keys(ctx, "*").Result(); len(keys) > 0 && !slices.Equal(keys, []string{"redlockd:health"}) {
		t.Fatalf("invalid calls wrote keys %v", keys) // the health check writes redlockd:health
	}
	if _, err := New(nil, Options{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("New without nodes err = %v", err)
	}
	if _, err := New([]*redis.Options{{Addr: "127.0.0.1:1"}}, Options{DefaultTTL: 2 * time.Minute}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("New with default TTL above max err = %v", err)
	}
}

// TestUnreachableNodeAddress: a node that refuses connections answers fast.
func TestUnreachableNodeAddress(t *testing.T) {
	servers := redistest.Cluster(t, 2)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	c, err := New([]*redis.Options{servers[0].Options(), servers[1].Options(), {Addr: dead}},
		Options{Quarantine: QuarantineOff, NodeTimeout: testNodeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.Warm(t.Context(), patience) // returns although one node refuses
	if el := time.Since(start); el >= patience/2 {
		t.Fatalf("Warm took %v: it waited for the refusing node", el)
	}
	lk, err := c.Acquire(t.Context(), uniq(t), AcquireOptions{})
	if err != nil || lk.Locked != 2 {
		t.Fatalf("acquire = %+v, %v", lk, err)
	}
}

// TestRestartQuarantine: fresh and restarted nodes do not vote until they
// have been up for max TTL; releases still reach them.
func TestRestartQuarantine(t *testing.T) {
	before := time.Now() // the servers start after it
	cl := newCluster(t, 3, Options{MaxTTL: shortMaxTTL, DefaultTTL: shortMaxTTL}, true)
	ctx := t.Context()
	if _, err := cl.c.Acquire(ctx, uniq(t), AcquireOptions{}); !errors.Is(err, ErrQuorumUnavailable) || !errors.Is(err, errQuarantined) {
		t.Fatalf("acquire on a fresh cluster err = %v, want quarantine", err)
	}
	// Until max TTL after each server's start, as its uptime in whole
	// seconds tells.
	for _, s := range cl.c.Status(ctx) {
		if q := s.QuarantinedUntil; q.IsZero() || q.Before(before.Add(shortMaxTTL-time.Second)) || q.After(time.Now().Add(shortMaxTTL+time.Second)) {
			t.Fatalf("node %s quarantined until %v (servers started after %v)", s.Addr, q, before)
		}
	}
	waitQuarantineOver(t, cl.c, patience)
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil || l.Locked < 2 {
		t.Fatalf("acquire after quarantine = %+v, %v", l, err)
	}
	// A node that restarts empty is caught when its connection is re-made,
	// before its first vote.
	cl.servers[0].Restart()
	cl.c.Status(ctx) // the first command after a restart may hit the dropped connection
	e, err := cl.c.Extend(ctx, "", res, l.Token, 0)
	if err != nil || e.Locked != 2 {
		t.Fatalf("extend with a restarted node = %+v, %v; want 2 voting", e, err)
	}
	// The extend's command may have met the dropped connection (then no new
	// one was made yet): the health loop's next check makes one.
	eventually(t, patience, "the restarted node quarantined", func() bool {
		return !cl.c.Status(ctx)[0].QuarantinedUntil.IsZero()
	})
	l2, err := cl.c.Acquire(ctx, uniq(t), AcquireOptions{})
	if err != nil || l2.Locked != 2 {
		t.Fatalf("acquire with a restarted node = %+v, %v; want 2 voting", l2, err)
	}
	// The quarantined node still holds the re-asserted key, and release reaches it.
	// An extend whose command met a connection the restart dropped cannot
	// tell; the next one puts the lock back.
	eventually(t, patience, "the re-assert on the restarted node", func() bool {
		if _, err := cl.c.Extend(ctx, "", res, l.Token, 0); err != nil {
			t.Fatal(err)
		}
		return cl.holders(t, res, l.Token) == 3
	})
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatal(err)
	}
	cl.settle()
	if got := cl.holders(t, res, ""); got != 0 {
		t.Fatalf("release left %d keys", got)
	}
}

func waitQuarantineOver(t *testing.T, c *Coordinator, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		over := true
		for _, s := range c.Status(t.Context()) {
			over = over && s.QuarantinedUntil.IsZero()
		}
		if over {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("quarantine did not end")
		}
		time.Sleep(50 * time.Millisecond) // time is the subject: the quarantine runs on the clock
	}
}

func TestUptime(t *testing.T) {
	up, err := uptime("# Server\r\nredis_version:7.0.15\r\nuptime_in_seconds:42\r\nuptime_in_days:0\r\n")
	if err != nil || up != 42*time.Second {
		t.Fatalf("uptime = %v, %v", up, err)
	}
	if _, err := uptime("# Server\r\n"); err == nil {
		t.Fatal("missing uptime accepted")
	}
}

// TestFenceOfSilentNode: a node whose acquire landed but whose reply was
// lost keeps its own (here much higher) tentative fence beside the lock; the
// lock's fence is the one the coordinator chose, for extend and inspect too.
func TestFenceOfSilentNode(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	res := uniq(t)
	high := fenceFloor() + 1e12
	if err := cl.servers[4].Client().Set(ctx, "redlockd:fence:/"+res, high, 0).Err(); err != nil {
		t.Fatal(err)
	}
	cl.c.Warm(ctx, patience) // the scripts loaded: a lost NOSCRIPT would hide the EVAL
	cl.hooks[4].lost.Store(true)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 10 * time.Second})
	cl.settle() // node 4's command met the fault
	cl.hooks[4].lost.Store(false)
	if err != nil || l.Locked < 3 || l.Fence >= high {
		t.Fatalf("acquire = %+v, %v; want a fence below node 4's %d on a quorum", l, err, high)
	}
	cl.settle()
	if got := cl.holders(t, res, l.Token); got != 5 {
		keys, _ := cl.servers[4].Client().Keys(ctx, "*").Result()
		t.Fatalf("the lost reply's SET did not land: holders %d; node 4 keys %v", got, keys)
	}
	e, err := cl.c.Extend(ctx, "", res, l.Token, 0)
	if err != nil || e.Fence != l.Fence {
		t.Fatalf("extend = %+v, %v; want the acquire's fence %d", e, err, l.Fence)
	}
	info, err := cl.c.Inspect(ctx, "", res)
	if err != nil || info.Fence != l.Fence {
		t.Fatalf("inspect = %+v, %v; want fence %d", info, err, l.Fence)
	}
	// Node 4 failed, so its SET may have recorded a fence of its own: the
	// fence is written back in the background to every node that granted,
	// and a re-acquire with the token (a generated token is valid as a
	// client token too) keeps it.
	eventually(t, patience, "the fence written back", func() bool {
		n := 0
		for _, s := range cl.servers[:4] {
			if f := readRecord(t, s.Client(), "redlockd:lock:/"+res).fence; f == strconv.FormatInt(l.Fence, 10) {
				n++
			}
		}
		return n >= 3
	})
	again, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: l.Token})
	if err != nil || again.Fence != l.Fence {
		t.Fatalf("idempotent re-acquire = %+v, %v; want fence %d", again, err, l.Fence)
	}
}

// TestReleaseQuarantinedNodeIsSilent: a quarantined node's "not here" does
// not prove the lock is gone: release answers ErrQuorumUnavailable, not
// ErrLockExpired, when the rest cannot decide.
func TestReleaseQuarantinedNodeIsSilent(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	ctx := t.Context()
	res := uniq(t)
	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Node 0 restarts empty and is quarantined; node 1 loses the key too.
	cl.c.nodes[0].until.Store(mono(time.Now().Add(time.Minute)))
	for _, s := range cl.servers[:2] {
		s.Client().Del(ctx, "redlockd:lock:/"+res)
	}
	// matched 1 (node 2) + silent 1 (quarantined node 0) < quorum? 2 >= 2: unknown.
	if err := cl.c.Release(ctx, "", res, l.Token); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("release err = %v, want ErrQuorumUnavailable", err)
	}
}

// TestFreeIn: when a held lock will be free on a quorum, from the refusals'
// remaining TTLs; a TTL of 0 (expiring now) is 1ms, not unknown, or a waiter
// refused in the lock's last millisecond would sleep until the fallback poll.
func TestFreeIn(t *testing.T) {
	for _, c := range []struct {
		pttls []int64
		want  time.Duration
	}{
		{[]int64{500, 300, 400}, 300 * time.Millisecond}, // 3 of 5 refused: 1 must expire
		{[]int64{500, 300, 400, 200, 100}, 300 * time.Millisecond},
		{[]int64{0, 300, 400}, time.Millisecond},
		{[]int64{-1, 300, 400}, 0},
		{[]int64{300, 400}, 0}, // too few to tell
	} {
		if got := freeIn(slices.Clone(c.pttls), 5, 3); got != c.want {
			t.Errorf("freeIn(%v) = %v, want %v", c.pttls, got, c.want)
		}
	}
}
