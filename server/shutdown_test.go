package server

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// TestShutdown checks that BeginShutdown turns a waiting acquire into 503
// shutting-down, lets a running non-waiting call finish, and refuses new
// /locks requests.
func TestShutdown(t *testing.T) {
	f := newFake(t)
	waiting, finishing := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	f.AcquireFn = func(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		if o.Wait == 0 {
			close(finishing)
			<-release
			return testLock(resource, tokenA, o.TTL), nil
		}
		close(waiting)
		<-ctx.Done()
		return redlock.Lock{}, errors.Join(&redlock.HeldError{Remaining: time.Second}, ctx.Err())
	}
	f.StatusFn = func(context.Context) []redlock.NodeStatus {
		return []redlock.NodeStatus{{Addr: "a:1", Up: true}, {Addr: "b:1", Up: true}, {Addr: "c:1", Up: true}}
	}
	s, h := newHandler(f, nil)

	waiter := make(chan *httptest.ResponseRecorder)
	go func() { waiter <- serve(t, h, request{method: "POST", target: "/locks/x", body: `{"wait_ms": 60000}`}) }()
	runner := make(chan *httptest.ResponseRecorder)
	go func() { runner <- serve(t, h, request{method: "POST", target: "/locks/y"}) }()
	<-waiting
	<-finishing
	if w := serve(t, h, request{method: "GET", target: "/readyz"}); w.Code != 200 {
		t.Fatalf("readyz before shutdown: got %d", w.Code)
	}

	s.BeginShutdown()
	select {
	case w := <-waiter:
		p := checkProblem(t, w, 503, "shutting-down")
		if w.Header().Get("Retry-After") == "" || p.RetryAfterMs == nil {
			t.Errorf("no retry hint: %+v", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting acquire did not end")
	}
	close(release)
	if w := <-runner; w.Code != 201 {
		t.Errorf("running acquire: got %d, want 201", w.Code)
	}

	for _, req := range []request{
		{method: "POST", target: "/locks/x"},
		{method: "PATCH", target: "/locks/x", headers: []string{"Lock-Token", tokenA}},
		{method: "DELETE", target: "/locks/x", headers: []string{"Lock-Token", tokenA}},
		{method: "GET", target: "/locks/x"},
	} {
		checkProblem(t, serve(t, h, req), 503, "shutting-down")
	}
	if w := serve(t, h, request{method: "GET", target: "/readyz"}); w.Code != 503 {
		t.Errorf("readyz after shutdown: got %d", w.Code)
	}
	if w := serve(t, h, request{method: "GET", target: "/healthz"}); w.Code != 200 {
		t.Errorf("healthz after shutdown: got %d", w.Code)
	}
	s.BeginShutdown() // idempotent
}
