package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// countHook counts the fan-out commands a node's client executes and the
// batches (pipelines, or lone commands) they went out in, and can hold every
// batch for a while before it is sent: a slow node.
type countHook struct {
	cmds, batches atomic.Int64
	delay         atomic.Int64 // nanoseconds
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *countHook) count(cmds []redis.Cmder) {
	n := 0
	for _, c := range cmds {
		if _, ok := c.(*roundCmd); ok {
			n++
		}
	}
	if n > 0 {
		h.cmds.Add(int64(n))
		h.batches.Add(1)
		time.Sleep(time.Duration(h.delay.Load()))
	}
}

// withCountHooks adds a countHook to every node of cl.
func withCountHooks(cl *cluster) []*countHook {
	var hooks []*countHook
	for _, n := range cl.c.nodes {
		h := &countHook{}
		n.client.AddHook(h)
		hooks = append(hooks, h)
	}
	return hooks
}

// cycle acquires and releases a lock of its own.
func cycle(t *testing.T, c *Coordinator) error {
	res := uniq(t)
	l, err := c.Acquire(t.Context(), res, AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	return c.Release(t.Context(), "", res, l.Token)
}

// TestBatching: concurrent requests share round trips: 32 goroutines
// acquiring and releasing distinct locks send their commands to each node in
// far fewer batches than commands, and every request succeeds.
func TestBatching(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	hooks := withCountHooks(cl)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 20 {
				if err := cycle(t, cl.c); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	cl.settle()
	for i, h := range hooks {
		cmds, batches := h.cmds.Load(), h.batches.Load()
		if cmds < 32*20*2 {
			t.Errorf("node %d ran %d commands, want at least %d", i, cmds, 32*20*2)
		}
		if batches*2 > cmds {
			t.Errorf("node %d: %d commands in %d batches: concurrent requests did not share round trips", i, cmds, batches)
		}
	}
}

// TestNodeCommandDurations: each node's reply time, as the Observer's NodeCommand gets it,
// is that node's own: with one node holding each batch for delay, its
// commands take at least delay and the others' mostly less, although the
// rounds wait for the slow node.
func TestNodeCommandDurations(t *testing.T) {
	const delay = testNodeTimeout / 10
	var mu sync.Mutex
	took := map[string][]time.Duration{}
	cl := newCluster(t, 3, Options{
		Observer: onNodeCommand(func(node string, d time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				took[node] = append(took[node], d)
			}
		})})
	hooks := withCountHooks(cl)
	hooks[2].delay.Store(int64(delay))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := cycle(t, cl.c); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	cl.settle() // the slow node answers after the rounds were decided
	mu.Lock()
	defer mu.Unlock()
	slow := cl.c.nodes[2].addr
	if len(took[slow]) != 16 {
		t.Fatalf("%d commands timed for the slow node, want 16: %v", len(took[slow]), took)
	}
	for node, ds := range took {
		fast := 0
		for _, d := range ds {
			if d < delay {
				fast++
			}
		}
		// The other nodes answer at once; a loaded machine may still
		// stall a few of their replies.
		if node == slow && fast > 0 || node != slow && fast < len(ds)/2 {
			t.Errorf("node %s: %d of %d commands under %v: %v", node, fast, len(ds), delay, ds)
		}
	}
}

// TestScriptCacheFlushed: a node that lost its script cache (SCRIPT FLUSH,
// or a restart) answers NOSCRIPT, and the round runs the script by EVAL
// instead: every node votes, with batching and without.
func TestScriptCacheFlushed(t *testing.T) {
	for _, naive := range []bool{false, true} {
		cl := newCluster(t, 3, Options{NoBatching: naive})
		for range 2 {
			for _, s := range cl.servers {
				if err := s.Client().ScriptFlush(t.Context()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			res := uniq(t)
			l, err := cl.c.Acquire(t.Context(), res, AcquireOptions{TTL: 10 * time.Second})
			if err != nil || l.Locked < 2 {
				t.Fatalf("naive %v: acquire after SCRIPT FLUSH = %+v, %v; want a quorum", naive, l, err)
			}
			if err := cl.c.Release(t.Context(), "", res, l.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestPausedNodeQueueCapped: a paused node costs bounded memory: once its
// queue holds maxQueued commands, a round's command to it fails at once
// instead of queueing; and no request waits for it: the other nodes make
// the quorum, and every acquire answers before the node timeout.
func TestPausedNodeQueueCapped(t *testing.T) {
	defer func(old int) { maxQueued = old }(maxQueued)
	maxQueued = 16
	const nodeTimeout = 2 * testNodeTimeout
	var full atomic.Int64
	cl := newCluster(t, 3, Options{NodeTimeout: nodeTimeout, DefaultTTL: 2 * nodeTimeout, Observer: onNodeCommand(func(_ string, _ time.Duration, err error) {
		if errors.Is(err, redis.ErrAutoPipelineQueueFull) {
			full.Add(1)
		}
	})})
	hooks := withCountHooks(cl)
	cl.servers[0].Pause()
	defer cl.servers[0].Resume()
	const n = 32
	var wg sync.WaitGroup
	var fast atomic.Int64
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			l, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{TTL: 10 * time.Second})
			if err != nil || l.Locked < 2 {
				t.Errorf("acquire with node 0 paused = %+v, %v; want 2 nodes", l, err)
			}
			if time.Since(start) < nodeTimeout/2 {
				fast.Add(1)
			}
		})
		// One acquire at a time reaches the healthy nodes, whose queues
		// never fill; node 0's grows by one each.
		eventually(t, patience, "the acquire reached nodes 1 and 2", func() bool {
			return hooks[1].cmds.Load() > int64(i) && hooks[2].cmds.Load() > int64(i)
		})
	}
	wg.Wait()
	if got, want := full.Load(), int64(n-maxQueued); got < want-1 || got > want+2 || fast.Load() != n {
		t.Fatalf("%d commands refused by node 0's full queue, want about %d; %d of %d acquires answered before the node timeout",
			got, want, fast.Load(), n)
	}
}

// TestStragglersEnd: rounds decided without a paused node leave its
// commands, and a goroutine per round, to finish in the background; none of
// them outlives the node timeout by much: the goroutines end, and once the
// node resumes its queue drains.
func TestStragglersEnd(t *testing.T) {
	const timeout = testNodeTimeout
	cl := newCluster(t, 3, Options{NodeTimeout: timeout})
	base := runtime.NumGoroutine()
	cl.servers[0].Pause()
	for range 100 {
		start := time.Now()
		if err := cycle(t, cl.c); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el >= timeout {
			t.Fatalf("a cycle with a paused node took %v: it waited for the node (timeout %v)", el, timeout)
		}
	}
	if n := runtime.NumGoroutine(); n < base+10 {
		t.Fatalf("%d goroutines, %d before: the rounds' stragglers are not awaited in the background", n, base)
	}
	eventually(t, timeout+patience, "the stragglers' goroutines end", func() bool { return runtime.NumGoroutine() <= base+5 })
	cl.servers[0].Resume()
	cl.settle()
	if q := cl.c.nodes[0].pipe.Len(); q != 0 {
		t.Fatalf("node 0's queue holds %d commands after it resumed", q)
	}
}

// hookCount reads how many hooks client has from go-redis's insides (it has
// no accessor for it).
func hookCount(t *testing.T, client *redis.Client) int {
	t.Helper()
	state := reflect.ValueOf(client).Elem().FieldByName("baseClient")
	if state.IsValid() {
		state = state.Elem().FieldByName("hooksMixin").FieldByName("state")
	}
	if !state.IsValid() || state.Kind() != reflect.Pointer {
		t.Fatal("go-redis's client keeps its hooks elsewhere now: update hookCount")
	}
	p := state.Elem().FieldByName("v") // the atomic.Pointer's pointer
	typ := state.Elem().Type().Field(0).Type.Elem().Elem()
	return reflect.NewAt(typ, p.UnsafePointer()).Elem().FieldByName("slice").Len()
}

// TestNodeClientsHaveNoHook: without Options.ClientHook the nodes' clients
// carry no hook, since any makes go-redis's automatic pipeline read the
// goroutine id of every batch; rounds still wake their caller as replies
// come in (node.await). With a ClientHook they carry it, after callers.
func TestNodeClientsHaveNoHook(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	for _, n := range cl.c.nodes {
		if got := hookCount(t, n.client) - 1; got != 0 { // newCluster adds a downHook
			t.Fatalf("node %d: %d hooks of the coordinator's, want 0", n.idx, got)
		}
	}
	if err := cycle(t, cl.c); err != nil {
		t.Fatal(err)
	}

	var seen atomic.Int64
	cl = newCluster(t, 3, Options{ClientHook: func(c *redis.Client) { c.AddHook(&countHook{}); seen.Add(1) }})
	for _, n := range cl.c.nodes {
		if got := hookCount(t, n.client) - 1; got != 2 {
			t.Fatalf("node %d: %d hooks, want 2 (callers and the ClientHook's)", n.idx, got)
		}
	}
	if seen.Load() != 3 {
		t.Fatalf("ClientHook called %d times, want 3", seen.Load())
	}
	if err := cycle(t, cl.c); err != nil {
		t.Fatal(err)
	}
}

// TestNodeClientsSpeakRESP2: every connection of the coordinator to a node
// speaks RESP2 (docs/design.md "Batching": nothing of RESP3 is used, and
// with it go-redis looks for push notifications before every reply), as
// the node's CLIENT LIST shows, also when the node's URL asks for RESP3.
func TestNodeClientsSpeakRESP2(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	if err := cycle(t, cl.c); err != nil {
		t.Fatal(err)
	}
	o, err := redis.ParseURL(cl.servers[0].URL() + "?protocol=3")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New([]*redis.Options{o}, Options{Quarantine: QuarantineOff})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Warm(t.Context(), patience)
	if err := cycle(t, c); err != nil {
		t.Fatal(err)
	}
	for i, s := range cl.servers {
		list, err := s.Client().ClientList(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		self, err := s.Client().ClientID(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for line := range strings.Lines(list) {
			if strings.HasPrefix(line, fmt.Sprintf("id=%d ", self)) {
				continue // the test's own
			}
			n++
			if !strings.Contains(line, " resp=2") {
				t.Errorf("node %d: a connection not in RESP2: %s", i, strings.TrimSpace(line))
			}
		}
		if n == 0 {
			t.Errorf("node %d: no connection of the coordinator", i)
		}
	}
}
