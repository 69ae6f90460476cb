package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// fakeLocker is a Locker whose methods call its function fields. newFake
// sets every field to a function that fails the test, so a test sets only the
// calls it expects.
type fakeLocker struct {
	AcquireFn func(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error)
	ReleaseFn func(ctx context.Context, namespace, resource, token string) error
	ExtendFn  func(ctx context.Context, namespace, resource, token string, ttl time.Duration) (redlock.Lock, error)
	InspectFn func(ctx context.Context, namespace, resource string) (redlock.Info, error)
	ListFn    func(ctx context.Context, o redlock.ListOptions) (redlock.Page, error)
	StatusFn  func(ctx context.Context) []redlock.NodeStatus

	AcquirePermitFn    func(ctx context.Context, name string, o redlock.PermitOptions) (redlock.Permit, error)
	ExtendPermitFn     func(ctx context.Context, namespace, name, token string, ttl time.Duration) (redlock.Permit, error)
	ReleasePermitFn    func(ctx context.Context, namespace, name, token string) error
	InspectSemaphoreFn func(ctx context.Context, namespace, name string) (redlock.SemaphoreInfo, error)

	AcquireMultiFn func(ctx context.Context, resources []string, o redlock.AcquireOptions) (redlock.MultiLock, error)
	ReleaseMultiFn func(ctx context.Context, namespace string, resources []string, token string) error
	ExtendMultiFn  func(ctx context.Context, namespace string, resources []string, token string, ttl time.Duration) (redlock.MultiLock, error)

	// Counters kept by validatingLocker (see there).
	calls, mutations, changed atomic.Int64
}

func newFake(t testing.TB) *fakeLocker {
	return &fakeLocker{
		AcquireFn: func(context.Context, string, redlock.AcquireOptions) (redlock.Lock, error) {
			t.Error("unexpected Acquire")
			return redlock.Lock{}, nil
		},
		ReleaseFn: func(context.Context, string, string, string) error {
			t.Error("unexpected Release")
			return nil
		},
		ExtendFn: func(context.Context, string, string, string, time.Duration) (redlock.Lock, error) {
			t.Error("unexpected Extend")
			return redlock.Lock{}, nil
		},
		InspectFn: func(context.Context, string, string) (redlock.Info, error) {
			t.Error("unexpected Inspect")
			return redlock.Info{}, nil
		},
		ListFn: func(context.Context, redlock.ListOptions) (redlock.Page, error) {
			t.Error("unexpected List")
			return redlock.Page{}, nil
		},
		StatusFn: func(context.Context) []redlock.NodeStatus {
			t.Error("unexpected Status")
			return nil
		},
		AcquirePermitFn: func(context.Context, string, redlock.PermitOptions) (redlock.Permit, error) {
			t.Error("unexpected AcquirePermit")
			return redlock.Permit{}, nil
		},
		ExtendPermitFn: func(context.Context, string, string, string, time.Duration) (redlock.Permit, error) {
			t.Error("unexpected ExtendPermit")
			return redlock.Permit{}, nil
		},
		ReleasePermitFn: func(context.Context, string, string, string) error {
			t.Error("unexpected ReleasePermit")
			return nil
		},
		InspectSemaphoreFn: func(context.Context, string, string) (redlock.SemaphoreInfo, error) {
			t.Error("unexpected InspectSemaphore")
			return redlock.SemaphoreInfo{}, nil
		},
		AcquireMultiFn: func(context.Context, []string, redlock.AcquireOptions) (redlock.MultiLock, error) {
			t.Error("unexpected AcquireMulti")
			return redlock.MultiLock{}, nil
		},
		ReleaseMultiFn: func(context.Context, string, []string, string) error {
			t.Error("unexpected ReleaseMulti")
			return nil
		},
		ExtendMultiFn: func(context.Context, string, []string, string, time.Duration) (redlock.MultiLock, error) {
			t.Error("unexpected ExtendMulti")
			return redlock.MultiLock{}, nil
		},
	}
}

// checkBounds refuses, as the coordinator does with ErrInvalid, a TTL or a
// wait beyond the bounds of its configuration (redlock.Options.MaxTTL and
// MaxWait, at their defaults): the server leaves those to it.
func checkBounds(ttl, wait time.Duration) error {
	switch {
	case ttl > redlock.DefaultMaxTTL:
		return fmt.Errorf("%w: ttl must be within [%d, %d] ms", redlock.ErrInvalid, redlock.MinTTL.Milliseconds(), redlock.DefaultMaxTTL.Milliseconds())
	case wait > redlock.DefaultMaxWait:
		return fmt.Errorf("%w: wait must be within [0, %d] ms", redlock.ErrInvalid, redlock.DefaultMaxWait.Milliseconds())
	}
	return nil
}

// boundedFake is newFake whose acquires and extends of locks answer as the
// coordinator does a TTL or wait beyond its bounds (checkBounds), and fail
// the test for any other arguments.
func boundedFake(t testing.TB) *fakeLocker {
	f := newFake(t)
	refuse := func(ttl, wait time.Duration) error {
		err := checkBounds(ttl, wait)
		if err == nil {
			t.Errorf("unexpected call with TTL %v, wait %v", ttl, wait)
		}
		return err
	}
	f.AcquireFn = func(_ context.Context, _ string, o redlock.AcquireOptions) (redlock.Lock, error) {
		return redlock.Lock{}, refuse(o.TTL, o.Wait)
	}
	f.ExtendFn = func(_ context.Context, _, _, _ string, ttl time.Duration) (redlock.Lock, error) {
		return redlock.Lock{}, refuse(ttl, 0)
	}
	return f
}

func (f *fakeLocker) Acquire(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
	return f.AcquireFn(ctx, resource, o)
}

func (f *fakeLocker) Release(ctx context.Context, namespace, resource, token string) error {
	return f.ReleaseFn(ctx, namespace, resource, token)
}

func (f *fakeLocker) Extend(ctx context.Context, namespace, resource, token string, ttl time.Duration) (redlock.Lock, error) {
	return f.ExtendFn(ctx, namespace, resource, token, ttl)
}

func (f *fakeLocker) Inspect(ctx context.Context, namespace, resource string) (redlock.Info, error) {
	return f.InspectFn(ctx, namespace, resource)
}

func (f *fakeLocker) List(ctx context.Context, o redlock.ListOptions) (redlock.Page, error) {
	return f.ListFn(ctx, o)
}

func (f *fakeLocker) AcquirePermit(ctx context.Context, name string, o redlock.PermitOptions) (redlock.Permit, error) {
	return f.AcquirePermitFn(ctx, name, o)
}

func (f *fakeLocker) ExtendPermit(ctx context.Context, namespace, name, token string, ttl time.Duration) (redlock.Permit, error) {
	return f.ExtendPermitFn(ctx, namespace, name, token, ttl)
}

func (f *fakeLocker) ReleasePermit(ctx context.Context, namespace, name, token string) error {
	return f.ReleasePermitFn(ctx, namespace, name, token)
}

func (f *fakeLocker) InspectSemaphore(ctx context.Context, namespace, name string) (redlock.SemaphoreInfo, error) {
	return f.InspectSemaphoreFn(ctx, namespace, name)
}

func (f *fakeLocker) AcquireMulti(ctx context.Context, resources []string, o redlock.AcquireOptions) (redlock.MultiLock, error) {
	return f.AcquireMultiFn(ctx, resources, o)
}
func (f *fakeLocker) ReleaseMulti(ctx context.Context, namespace string, resources []string, token string) error {
	return f.ReleaseMultiFn(ctx, namespace, resources, token)
}
func (f *fakeLocker) ExtendMulti(ctx context.Context, namespace string, resources []string, token string, ttl time.Duration) (redlock.MultiLock, error) {
	return f.ExtendMultiFn(ctx, namespace, resources, token, ttl)
}
func (f *fakeLocker) Status(ctx context.Context) []redlock.NodeStatus { return f.StatusFn(ctx) }
func (f *fakeLocker) Explain(err error) redlock.Unavailable           { return redlock.Explain(err) }
func (f *fakeLocker) Quorum() int                                     { return 3 }
func (f *fakeLocker) Nodes() int                                      { return 5 }

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newHandler returns the handler of a Server over l with default limits,
// logging to log (nil: nowhere).
func newHandler(l Locker, log io.Writer) (*Server, http.Handler) {
	cfg := Config{Locker: l}
	if log != nil {
		cfg.Log = zerolog.New(log)
	}
	s := New(cfg)
	return s, s.Handler()
}

// request describes one test request. Headers are name, value pairs.
type request struct {
	method, target, body string
	headers              []string
}

// newRequest is the request a test sends for req.
func newRequest(req request) *http.Request {
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	r := httptest.NewRequest(req.method, req.target, body)
	for i := 0; i+1 < len(req.headers); i += 2 {
		r.Header.Add(req.headers[i], req.headers[i+1])
	}
	return r
}

func serve(t testing.TB, h http.Handler, req request) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, newRequest(req))
	if w.Header().Get("X-Request-Id") == "" {
		t.Errorf("%s %s: no X-Request-Id", req.method, req.target)
	}
	return w
}

// checkProblem checks that w is a problem of the given status and kind and
// returns it.
func checkProblem(t testing.TB, w *httptest.ResponseRecorder, status int, kind string) api.Problem {
	t.Helper()
	if got := w.Code; got != status {
		t.Errorf("status: got %d, want %d (body %s)", got, status, w.Body)
	}
	if exp, got := "application/problem+json", w.Header().Get("Content-Type"); exp != got {
		t.Errorf("Content-Type: got %q, want %q", got, exp)
	}
	var p api.Problem
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body: %v", err)
	}
	if exp := api.ProblemType("urn:redlockd:problem:" + kind); p.Type != exp || !p.Type.Valid() {
		t.Errorf("type: got %q, want %q (detail %q)", p.Type, exp, p.Detail)
	}
	if p.Status != status || p.Title == "" || p.Detail == "" {
		t.Errorf("problem: got %+v", p)
	}
	return p
}

// decode decodes the JSON body of w into a T, checking its status and
// Content-Type.
func decode[T any](t testing.TB, w *httptest.ResponseRecorder, status int) T {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status: got %d, want %d (body %s)", w.Code, status, w.Body)
	}
	if exp, got := "application/json", w.Header().Get("Content-Type"); exp != got {
		t.Errorf("Content-Type: got %q, want %q", got, exp)
	}
	var v T
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("body: %v", err)
	}
	return v
}

const (
	tokenA = "tokenAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	tokenB = "tokenBBBBBBBBBBBBBBBBBBBBBBBBBBB"
)

// testLock is the lock the fake returns.
func testLock(resource, token string, ttl time.Duration) redlock.Lock {
	now := time.Now()
	validity := ttl - 5*time.Millisecond
	return redlock.Lock{
		Resource: resource, Token: token, Fence: 42, TTL: ttl, Validity: validity,
		Start: now, Until: now.Add(validity), Nodes: 5, Quorum: 3, Locked: 4,
	}
}
