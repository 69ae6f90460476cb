package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/redlockd/redlockd/redlock"
)

// parking is a Server over a fake whose locks always have waiters, so that
// every acquire with wait_ms is parked, served on a real listener.
type parking struct {
	s        *Server
	ts       *httptest.Server
	log      *syncBuffer
	hijacked atomic.Int64 // connections net/http let go of
}

// startParking serves f; with returned, the parked connections come back to
// the HTTP server.
func startParking(t *testing.T, f *fakeLocker, returned bool) *parking {
	t.Helper()
	f.QueuedFn = func(string, string) bool { return true }
	p := &parking{log: &syncBuffer{}}
	var h http.Handler
	p.s, h = newHandler(f, p.log)
	p.ts = httptest.NewUnstartedServer(h)
	p.ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateHijacked {
			p.hijacked.Add(1)
		}
	}
	p.ts.Start()
	if returned {
		go func() { _ = p.ts.Config.Serve(p.s.Returned()) }()
	}
	t.Cleanup(func() {
		_ = p.s.Returned().Close()
		p.ts.Close()
	})
	return p
}

// dial opens a connection to the server.
func (p *parking) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// waitParked waits until n connections were hijacked.
func (p *parking) waitParked(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, "parked connections", func() bool { return p.hijacked.Load() == n })
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// send writes raw HTTP/1.1 requests to c.
func send(t *testing.T, c net.Conn, reqs ...string) {
	t.Helper()
	if _, err := io.WriteString(c, strings.Join(reqs, "")); err != nil {
		t.Fatal(err)
	}
}

// acquireReq is a raw waiting acquire of resource r.
func acquireReq(r, extraHeaders string) string {
	body := `{"wait_ms":5000}`
	return "POST /locks/" + r + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extraHeaders +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// readResponse reads one response from br, with its body.
func readResponse(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(body)
}

// blockingAcquire makes f's Acquire wait until release is closed (then
// grant the lock) or its ctx ends (then fail as the coordinator does), and
// report that end on ended.
func blockingAcquire(f *fakeLocker, release <-chan struct{}, ended chan<- error) {
	f.AcquireFn = func(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		select {
		case <-release:
			ended <- nil
			return testLock(resource, tokenA, 30*time.Second), nil
		case <-ctx.Done():
			ended <- ctx.Err()
			return redlock.Lock{}, errors.Join(&redlock.HeldError{}, ctx.Err())
		}
	}
}

// TestParkedAcquire: a waiting acquire behind others lets go of its
// net/http connection while it waits, gets its 201 with the usual headers,
// is logged, and its connection serves the client's next request.
func TestParkedAcquire(t *testing.T) {
	f := newFake(t)
	release, ended := make(chan struct{}), make(chan error, 1)
	blockingAcquire(f, release, ended)
	f.ReleaseFn = func(context.Context, string, string, string) error { return nil }
	p := startParking(t, f, true)
	c, br := p.dial(t)

	send(t, c, acquireReq("r1", "X-Request-Id: park-1\r\n"))
	p.waitParked(t, 1)
	if strings.Contains(p.log.String(), "park-1") {
		t.Errorf("logged before it was answered:\n%s", p.log)
	}
	close(release)
	resp, body := readResponse(t, br)
	if resp.StatusCode != http.StatusCreated || resp.Close {
		t.Fatalf("got %d (close %v): %s", resp.StatusCode, resp.Close, body)
	}
	for h, want := range map[string]string{"X-Request-Id": "park-1", "Location": "/locks/r1", "Content-Type": "application/json"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: got %q, want %q", h, got, want)
		}
	}
	var lock struct{ Token string }
	if err := json.Unmarshal([]byte(body), &lock); err != nil || lock.Token != tokenA {
		t.Errorf("body %s: %v", body, err)
	}
	waitFor(t, "the log line", func() bool { return strings.Contains(p.log.String(), `"req_id":"park-1"`) })
	var line struct {
		Status  int
		Outcome string
		Route   string
	}
	for _, l := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(l, `"req_id":"park-1"`) {
			_ = json.Unmarshal([]byte(l), &line)
		}
	}
	if line.Status != http.StatusCreated || line.Outcome != "acquired" || line.Route != "/locks/{resource}" {
		t.Errorf("log line: %+v\n%s", line, p.log)
	}

	// Keep-alive: the same connection serves the release.
	send(t, c, "DELETE /locks/r1 HTTP/1.1\r\nHost: x\r\nLock-Token: "+tokenA+"\r\n\r\n")
	if resp, body := readResponse(t, br); resp.StatusCode != http.StatusNoContent {
		t.Errorf("release on the returned connection: %d %s", resp.StatusCode, body)
	}
}

// TestParkedLetsGoOfResponse: a parked acquire keeps nothing of the
// response net/http made for its request (its buffers are some 3 KiB a
// waiter): that response is collected while the acquire waits.
func TestParkedLetsGoOfResponse(t *testing.T) {
	f := newFake(t)
	release, ended := make(chan struct{}), make(chan error, 1)
	blockingAcquire(f, release, ended)
	f.QueuedFn = func(string, string) bool { return true }
	_, h := newHandler(f, nil)
	responses := make(chan weak.Pointer[byte], 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// w is a pointer to net/http's response; a weak pointer to its
		// first byte tells when it is collected.
		responses <- weak.Make((*byte)(reflect.ValueOf(w).UnsafePointer()))
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)

	send(t, c, acquireReq("r1", ""))
	resp := <-responses
	waitFor(t, "net/http's response to be collected", func() bool {
		runtime.GC()
		return resp.Value() == nil
	})
	select {
	case err := <-ended:
		t.Fatalf("the acquire ended (%v) before the response was collected", err)
	default:
	}
	close(release)
	if resp, body := readResponse(t, br); resp.StatusCode != http.StatusCreated {
		t.Fatalf("got %d: %s", resp.StatusCode, body)
	}
}

// TestParkedPipelined: a request pipelined behind a parked acquire is
// served after it, on the same connection.
func TestParkedPipelined(t *testing.T) {
	f := newFake(t)
	release, ended := make(chan struct{}), make(chan error, 1)
	blockingAcquire(f, release, ended)
	f.StatusFn = func(context.Context) []redlock.NodeStatus { return nil }
	p := startParking(t, f, true)
	c, br := p.dial(t)
	send(t, c, acquireReq("r1", ""), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	p.waitParked(t, 1)
	close(release)
	if resp, body := readResponse(t, br); resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire: %d %s", resp.StatusCode, body)
	}
	if resp, body := readResponse(t, br); resp.StatusCode != http.StatusOK {
		t.Errorf("pipelined /healthz: %d %s", resp.StatusCode, body)
	}
}

// TestParkedClientGone: a parked acquire whose client goes away stops
// waiting at once, and leaves no goroutine behind.
func TestParkedClientGone(t *testing.T) {
	f := newFake(t)
	ended := make(chan error, 1)
	blockingAcquire(f, nil, ended)
	p := startParking(t, f, true)
	base := runtime.NumGoroutine()
	c, _ := p.dial(t)
	send(t, c, acquireReq("r1", "X-Request-Id: gone-1\r\n"))
	p.waitParked(t, 1)
	_ = c.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the acquire ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the acquire went on waiting after its client went away")
	}
	waitFor(t, "the log line", func() bool { return strings.Contains(p.log.String(), "gone-1") })
	waitFor(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })
	if err := p.s.WaitParked(t.Context()); err != nil {
		t.Error(err)
	}
}

// TestParkedShutdown: BeginShutdown answers a parked acquire 503
// shutting-down, and WaitParked returns once it is answered.
func TestParkedShutdown(t *testing.T) {
	f := newFake(t)
	ended := make(chan error, 1)
	blockingAcquire(f, nil, ended)
	p := startParking(t, f, true)
	c, br := p.dial(t)
	send(t, c, acquireReq("r1", ""))
	p.waitParked(t, 1)
	p.s.BeginShutdown()
	resp, body := readResponse(t, br)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "shutting-down") {
		t.Errorf("got %d %s", resp.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := p.s.WaitParked(ctx); err != nil {
		t.Error(err)
	}
}

// TestParkedNotReturned: while nothing serves Server.Returned, a parked
// acquire's response says "Connection: close", and the connection is closed.
func TestParkedNotReturned(t *testing.T) {
	f := newFake(t)
	release, ended := make(chan struct{}), make(chan error, 1)
	blockingAcquire(f, release, ended)
	p := startParking(t, f, false)
	c, br := p.dial(t)
	send(t, c, acquireReq("r1", ""))
	p.waitParked(t, 1)
	close(release)
	resp, body := readResponse(t, br)
	if resp.StatusCode != http.StatusCreated || !resp.Close {
		t.Errorf("got %d, close %v: %s", resp.StatusCode, resp.Close, body)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the response: %v, %v; want EOF", n, err)
	}
}

// TestParkFallback: a ResponseWriter that cannot be hijacked (as on HTTP/2)
// waits in its handler instead.
func TestParkFallback(t *testing.T) {
	f := newFake(t)
	f.QueuedFn = func(string, string) bool { return true }
	f.AcquireFn = func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		return testLock(resource, tokenA, 30*time.Second), nil
	}
	_, h := newHandler(f, nil)
	w := serve(t, h, request{method: http.MethodPost, target: "/locks/r1", body: `{"wait_ms":1000}`})
	if w.Code != http.StatusCreated {
		t.Errorf("got %d %s", w.Code, w.Body)
	}
}
