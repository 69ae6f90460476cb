package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu        sync.Mutex
	decisions []Decision
	dctxs     []context.Context // of each decision
	nodes     map[string]int    // node -> calls
	nodeErrs  map[string]int    // node -> failed calls
	ctxs      []context.Context // of every NodeCommand and Decided
	waiting   []int
	waited    []bool
	censuses  []Census
}

func newRecorder() *recorder { return &recorder{nodes: map[string]int{}, nodeErrs: map[string]int{}} }

func (r *recorder) NodeCommand(ctx context.Context, node string, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes[node]++
	if err != nil {
		r.nodeErrs[node]++
	}
	r.ctxs = append(r.ctxs, ctx)
}

func (r *recorder) Decided(ctx context.Context, d Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decisions = append(r.decisions, d)
	r.dctxs = append(r.dctxs, ctx)
	r.ctxs = append(r.ctxs, ctx)
}

func (r *recorder) Waiting(_ context.Context, delta int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiting = append(r.waiting, delta)
}

func (r *recorder) Waited(_ context.Context, _ time.Duration, acquired bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waited = append(r.waited, acquired)
}

func (r *recorder) Census(c Census) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.censuses = append(r.censuses, c)
}

// take returns the decisions so far and forgets them.
func (r *recorder) take() []Decision { return r.takeOf(nil) }

// takeOf returns the decisions so far made for callers whose context has
// ctxKey tag (all of them if tag is nil), and forgets every decision.
func (r *recorder) takeOf(tag any) []Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []Decision
	for i, x := range r.decisions {
		if tag == nil || r.dctxs[i].Value(ctxKey{}) == tag {
			d = append(d, x)
		}
	}
	r.decisions, r.dctxs = nil, nil
	return d
}

// onNodeCommand is an Observer of node commands only.
type onNodeCommand func(node string, took time.Duration, err error)

func (f onNodeCommand) NodeCommand(_ context.Context, node string, took time.Duration, err error) {
	f(node, took, err)
}
func (onNodeCommand) Decided(context.Context, Decision)           {}
func (onNodeCommand) Waiting(context.Context, int)                {}
func (onNodeCommand) Waited(context.Context, time.Duration, bool) {}
func (onNodeCommand) Census(Census)                               {}

type ctxKey struct{}

// TestObserver: the observer hears every decision of an acquire, with its
// caller's context, every node's call, the waiters joining and leaving, the
// end of a wait and the census; Stats counts the same decisions; and
// Observers hands each event to every observer it combines.
func TestObserver(t *testing.T) {
	rec, other := newRecorder(), newRecorder()
	cl := newCluster(t, 3, Options{Observer: Observers(rec, nil, other), CensusInterval: 20 * time.Millisecond})
	ctx := context.WithValue(t.Context(), ctxKey{}, "caller")
	res := uniq(t)

	l, err := cl.c.Acquire(ctx, res, AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{}); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("second acquire: %v", err)
	}
	want := []Decision{{Outcome: OutcomeAcquired, Round: true}, {Outcome: OutcomeHeld, Round: true}}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Fatalf("decisions %+v, want %+v", got, want)
	}
	cl.settle()
	rec.mu.Lock()
	for _, s := range cl.servers {
		if rec.nodes[s.Addr()] < 2 { // at least the two acquire rounds
			t.Errorf("node %s: %d calls observed", s.Addr(), rec.nodes[s.Addr()])
		}
	}
	for _, c := range rec.ctxs {
		if c.Value(ctxKey{}) != "caller" {
			t.Errorf("an event without the caller's context")
			break
		}
	}
	rec.mu.Unlock()

	// A waiter: it joins the queue, is refused while it waits, gets the
	// lock once released.
	done := make(chan error)
	go func() {
		_, err := cl.c.Acquire(ctx, res, AcquireOptions{Wait: 2 * patience})
		done <- err
	}()
	eventually(t, patience, "the waiter to wait", func() bool { return cl.c.Stats().Waiting == 1 })
	if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	if !slices.Equal(rec.waiting, []int{1, -1}) || !slices.Equal(rec.waited, []bool{true}) {
		t.Errorf("waiting %v, waited %v; want [1 -1], [true]", rec.waiting, rec.waited)
	}
	rec.mu.Unlock()
	if got := rec.take(); len(got) == 0 || got[len(got)-1] != (Decision{Outcome: OutcomeAcquired, Round: true}) {
		t.Errorf("the waiter's decisions %+v: want its last acquired", got)
	}

	// No quorum: unavailable, and each node down counts a failed call.
	cl.setDown(0b011)
	if _, err := cl.c.Acquire(ctx, uniq(t), AcquireOptions{}); !errors.Is(err, ErrQuorumUnavailable) {
		t.Fatalf("acquire with 2 of 3 down: %v", err)
	}
	// Split or not: whether node 2's grant came before the two errors decided.
	if got := rec.take(); len(got) != 1 || got[0].Outcome != OutcomeUnavailable || !got[0].Round {
		t.Errorf("decisions with no quorum %+v", got)
	}
	cl.setDown(0)
	rec.mu.Lock()
	if rec.nodeErrs[cl.servers[0].Addr()] == 0 || rec.nodeErrs[cl.servers[1].Addr()] == 0 || rec.nodeErrs[cl.servers[2].Addr()] != 0 {
		t.Errorf("failed calls by node %v", rec.nodeErrs)
	}
	rec.mu.Unlock()

	eventually(t, patience, "a census", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.censuses) > 0 && rec.censuses[0].Node != ""
	})

	// Stats counts what the observers were told; the other observer heard
	// the same.
	st := cl.c.Stats()
	if st.Attempts < 4 || st.Acquired < 2 || st.Held < 1 || st.Unavailable != 1 || st.Waiting != 0 {
		t.Errorf("stats %+v", st)
	}
	other.mu.Lock()
	defer other.mu.Unlock()
	if len(other.decisions) != int(st.Acquired+st.Held+st.Unavailable) || len(other.waited) != 1 || len(other.censuses) == 0 {
		t.Errorf("the second observer heard %d decisions (stats: %+v), %d waits, %d censuses",
			len(other.decisions), st, len(other.waited), len(other.censuses))
	}
}

// TestObserverNoRound: an acquire refused while waiters here come first,
// and the retry of an acquire whose lock its token holds, are decided
// without an acquire round.
func TestObserverNoRound(t *testing.T) {
	rec := newRecorder()
	cl := newCluster(t, 3, Options{Observer: rec})
	ctx := context.WithValue(t.Context(), ctxKey{}, "caller") // the waiter's decisions are not
	res, token := uniq(t), NewToken()
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: token, TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(t.Context())
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_, _ = cl.c.Acquire(wctx, res, AcquireOptions{Wait: 2 * patience})
	}()
	defer func() { cancel(); <-waited }() // before the coordinator closes
	eventually(t, patience, "the waiter to wait", func() bool { return cl.c.Stats().Waiting == 1 })
	rec.take()
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{}); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("acquire behind a waiter: %v", err)
	}
	if _, err := cl.c.Acquire(ctx, res, AcquireOptions{Token: token, TTL: 30 * time.Second}); err != nil {
		t.Fatalf("retry of the holder's acquire: %v", err)
	}
	want := []Decision{{Outcome: OutcomeHeld}, {Outcome: OutcomeAcquired}}
	if got := rec.takeOf("caller"); !slices.Equal(got, want) {
		t.Errorf("decisions %+v, want %+v", got, want)
	}
}
