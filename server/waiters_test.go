package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/redlock"
)

// waitingFake is a Locker whose every lock is held: an acquire without a
// wait is refused at once, and a waiting one reports its namespace on
// entered and waits until release is closed (then it gets the lock) or its
// context ends. It fails the test if more acquires of one namespace wait at
// once than perNS.
func waitingFake(t *testing.T, perNS int64) (f *fakeLocker, entered chan string, release chan struct{}) {
	f = newFake(t)
	entered = make(chan string, 100)
	release = make(chan struct{})
	var mu sync.Mutex
	inside := map[string]int64{}
	f.AcquireFn = func(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		if o.Wait == 0 {
			return redlock.Lock{}, &redlock.HeldError{}
		}
		mu.Lock()
		inside[o.Namespace]++
		if inside[o.Namespace] > perNS {
			t.Errorf("%d acquires of namespace %q wait at once, want at most %d", inside[o.Namespace], o.Namespace, perNS)
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			inside[o.Namespace]--
			mu.Unlock()
		}()
		entered <- o.Namespace
		select {
		case <-release:
			return testLock(resource, tokenA, o.TTL), nil
		case <-ctx.Done():
			return redlock.Lock{}, errors.Join(&redlock.HeldError{}, ctx.Err())
		}
	}
	f.StatusFn = func(context.Context) []redlock.NodeStatus { return nil }
	return f, entered, release
}

// TestMaxWaitersPerNamespace checks that one namespace (API key) cannot take
// every waiting slot: once key A's acquires wait in their share, A's next
// one gets 503 too-many-waiters saying so, while key B's still gets a slot;
// a waiter whose client goes away gives its slot back; the count of slots
// taken follows. (redlockd_waiters is the coordinator's count of queued
// waiters, which it reports to its Observer: see TestMetrics.)
func TestMaxWaitersPerNamespace(t *testing.T) {
	f, entered, release := waitingFake(t, 2)
	s := New(Config{Locker: f, Keys: testKeys(t), MaxWaiters: 3, MaxWaitersPerNamespace: 2})
	h := s.Handler()
	as := []string{"Authorization", "Bearer " + keyA}
	bs := []string{"Authorization", "Bearer " + keyB}
	wait := func(hdr []string) request {
		return request{method: "POST", target: "/locks/x", body: `{"wait_ms": 5000}`, headers: hdr}
	}
	slots := func() int64 { return s.waiting.Load() }

	var wg sync.WaitGroup
	codes := make(chan int, 10)
	start := func(req request, ctx context.Context) {
		wg.Go(func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, newRequest(req).WithContext(ctx))
			codes <- w.Code
		})
	}
	// A's first waiter goes away later: its client cancels.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start(wait(as), ctx)
	start(wait(as), context.Background())
	<-entered
	<-entered

	// A has its share: its next waiter is refused, the limit named.
	p := checkProblem(t, serve(t, h, wait(as)), 503, "too-many-waiters")
	if !strings.Contains(p.Detail, "per-namespace limit") || strings.Contains(p.Detail, keyA) || strings.Contains(p.Detail, "ns-a") {
		t.Errorf("A's detail %q", p.Detail)
	}
	// B still gets a slot.
	start(wait(bs), context.Background())
	if ns := <-entered; ns != "ns-b" {
		t.Fatalf("entered %q, want ns-b", ns)
	}
	if v := slots(); v != 3 {
		t.Errorf("waiting slots taken %v, want 3", v)
	}
	// Now the gateway is full: B's next waiter hits the gateway's limit.
	p = checkProblem(t, serve(t, h, wait(bs)), 503, "too-many-waiters")
	if !strings.Contains(p.Detail, "the gateway's limit") {
		t.Errorf("B's detail %q", p.Detail)
	}

	// A's first client goes away: its slot is A's again.
	cancel()
	<-codes // its handler returned
	if v := slots(); v != 2 {
		t.Errorf("waiting slots taken %v after a waiter went away, want 2", v)
	}
	start(wait(as), context.Background())
	if ns := <-entered; ns != "ns-a" {
		t.Fatalf("entered %q, want ns-a", ns)
	}

	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 201 {
			t.Errorf("waiter got %d, want 201", c)
		}
	}
	if v := slots(); v != 0 {
		t.Errorf("waiting slots taken %v after every waiter ended, want 0", v)
	}
	s.waitMu.Lock()
	if len(s.nsWaiting) != 0 {
		t.Errorf("namespace counts left: %v", s.nsWaiting)
	}
	s.waitMu.Unlock()
}

// TestMaxWaitersFreeLock checks that a waiting acquire of a free lock is
// served at once when every waiting slot is taken: it needs none.
func TestMaxWaitersFreeLock(t *testing.T) {
	f, entered, release := waitingFake(t, 1)
	free := f.AcquireFn
	f.AcquireFn = func(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		if resource == "free" {
			if o.Wait != 0 {
				t.Errorf("the free lock was acquired with a wait of %v", o.Wait)
			}
			return testLock(resource, tokenA, o.TTL), nil
		}
		return free(ctx, resource, o)
	}
	h := New(Config{Locker: f, MaxWaiters: 1}).Handler()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	wg.Go(func() { serve(t, h, request{method: "POST", target: "/locks/x", body: `{"wait_ms": 5000}`}) })
	<-entered
	checkProblem(t, serve(t, h, request{method: "POST", target: "/locks/x", body: `{"wait_ms": 5000}`}), 503, "too-many-waiters")
	decode[map[string]any](t, serve(t, h, request{method: "POST", target: "/locks/free", body: `{"wait_ms": 5000}`}), 201)
}

// TestMaxWaitersPerNamespaceDefault checks the default share: a quarter of
// MaxWaiters with API keys, all of it without (everyone is in namespace "").
func TestMaxWaitersPerNamespaceDefault(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{MaxWaiters: 100, Keys: testKeys(t)}, 25},
		{Config{MaxWaiters: 3, Keys: testKeys(t)}, 1},
		{Config{Keys: testKeys(t)}, DefaultMaxWaiters / 4},
		{Config{MaxWaiters: 100}, 100},
		{Config{MaxWaiters: 100, Keys: testKeys(t), MaxWaitersPerNamespace: 60}, 60},
	} {
		c.cfg.Locker = newFake(t)
		if got := New(c.cfg).cfg.MaxWaitersPerNamespace; got != c.want {
			t.Errorf("MaxWaiters %d, keys %v, MaxWaitersPerNamespace %d: share %d, want %d",
				c.cfg.MaxWaiters, c.cfg.Keys != nil, c.cfg.MaxWaitersPerNamespace, got, c.want)
		}
	}
}

// TestWaitersExact hammers the waiting slots with acquires of several
// namespaces that wait, are cancelled or are refused, and checks that no
// namespace ever has more than its share and that every slot comes back.
func TestWaitersExact(t *testing.T) {
	f, entered, release := waitingFake(t, 3)
	go func() {
		for range entered {
		}
	}()
	keys := []string{keyA, keyB}
	s := New(Config{Locker: f, Keys: testKeys(t), MaxWaiters: 5, MaxWaitersPerNamespace: 3})
	h := s.Handler()
	var wg sync.WaitGroup
	var ok, full atomic.Int64
	for i := range 200 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%7)*time.Millisecond)
			defer cancel()
			req := request{method: "POST", target: "/locks/x", body: `{"wait_ms": 5000}`,
				headers: []string{"Authorization", "Bearer " + keys[i%2]}}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, newRequest(req).WithContext(ctx))
			switch {
			case w.Code == 201:
				ok.Add(1)
			case strings.Contains(w.Body.String(), "too-many-waiters"):
				full.Add(1)
			}
		})
		if i == 150 {
			close(release)
		}
	}
	wg.Wait()
	close(entered)
	if s.waiting.Load() != 0 || len(s.nsWaiting) != 0 {
		t.Errorf("slots left taken: %d, %v", s.waiting.Load(), s.nsWaiting)
	}
	t.Logf("%d acquired, %d refused for want of a slot", ok.Load(), full.Load())
}

// TestWaiterOnConnection: waiting acquires wait in their handlers on real
// connections. One whose client closes its connection stops waiting at once,
// is logged as client_gone with status 499 and gives its slot back; one that
// gets the lock is answered on its keep-alive connection, which then serves
// the client's next request.
func TestWaiterOnConnection(t *testing.T) {
	f, entered, release := waitingFake(t, 10)
	lines := make(chanWriter, 10)
	s := New(Config{Locker: f, Log: zerolog.New(lines)})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	const body = `{"wait_ms":5000}`
	acquire := "POST /locks/r HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body

	gone, _ := dial()
	fmt.Fprintf(gone, acquire, "gone-1")
	<-entered
	_ = gone.Close()
	select {
	case l := <-lines:
		if !strings.Contains(l, `"req_id":"gone-1"`) || !strings.Contains(l, `"status":499`) ||
			!strings.Contains(l, `"outcome":"client_gone"`) || s.waiting.Load() != 0 {
			t.Errorf("client gone: waiting %d, log %s", s.waiting.Load(), l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the acquire went on waiting after its client went away")
	}

	c, br := dial()
	fmt.Fprintf(c, acquire, "waits-1")
	<-entered
	close(release)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusCreated || resp.Close {
		t.Fatalf("waiter: %v %+v", err, resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("next request on the connection: %v %+v", err, resp)
	}
}

// chanWriter sends each write (a log line) on the channel.
type chanWriter chan string

func (c chanWriter) Write(p []byte) (int, error) {
	c <- string(p)
	return len(p), nil
}

// TestWaitBoundWhenSlotsFull: an acquire that finds every waiting slot taken
// makes one round without its wait, which the coordinator then never sees;
// a wait_ms above max wait is still 400 invalid-request naming wait_ms, and
// takes no round.
func TestWaitBoundWhenSlotsFull(t *testing.T) {
	f, entered, release := waitingFake(t, 1)
	h := New(Config{Locker: f, MaxWaiters: 1}).Handler()
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, newRequest(request{method: "POST", target: "/locks/x", body: `{"wait_ms": 5000}`}))
		done <- w
	}()
	<-entered // the only slot is taken
	w := serve(t, h, request{method: "POST", target: "/locks/y", body: fmt.Sprintf(`{"wait_ms": %d}`, redlock.DefaultMaxWait.Milliseconds()+1)})
	if p := checkProblem(t, w, http.StatusBadRequest, "invalid-request"); !strings.Contains(p.Detail, "wait_ms") {
		t.Errorf("detail %q does not name wait_ms", p.Detail)
	}
	close(release)
	if w := <-done; w.Code != http.StatusCreated {
		t.Errorf("the waiting acquire: %d %s", w.Code, w.Body)
	}
}
