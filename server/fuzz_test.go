package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redlockd/redlockd/redlock"
)

// FuzzHandlers sends arbitrary requests to the handler, once without API
// keys and once with: none may panic or get a 5xx, every response has an
// X-Request-Id, every error is a problem, the Locker only ever sees valid
// arguments (and the namespace of the request's key), a rejected request
// (400, 401, 404 with no route, 405, 413, too many waiters) never reaches
// the Locker to take, extend or release a lock, a request without a valid
// key reaches nothing at all, and a lock the Locker took, extended or
// released is always answered 2xx. headers holds "Name: value" lines.
func FuzzHandlers(f *testing.F) {
	for _, tc := range badRequests {
		f.Add(tc.req.method, tc.req.target, headerLines(tc.req.headers), tc.req.body)
	}
	f.Add("POST", "/locks/job", "Content-Type: application/json", `{"ttl_ms": 100, "wait_ms": 5, "token": "`+tokenA+`", "owner": "x"}`)
	f.Add("PATCH", "/locks/job:1", "Lock-Token: "+tokenA, `{"ttl_ms": 60000}`)
	f.Add("DELETE", "/locks/a.b-c_d", "Lock-Token: "+tokenB, "")
	f.Add("GET", "/locks/held", "", "")
	f.Add("GET", "/locks?prefix=job-&limit=10&cursor=MC4wLjAu", "", "")
	f.Add("GET", "/locks?limit=0&prefix=a*", "Authorization: Bearer "+keyA, "")
	f.Add("POST", "/semaphores/api", "Content-Type: application/json", `{"limit": 4, "ttl_ms": 100, "wait_ms": 5, "token": "`+tokenA+`", "owner": "x"}`)
	f.Add("POST", "/semaphores/api", "", `{"limit": 1.5}`)
	f.Add("PATCH", "/semaphores/api:1", "Lock-Token: "+tokenA, `{"ttl_ms": 60000}`)
	f.Add("DELETE", "/semaphores/a.b", "Lock-Token: "+tokenB, "")
	f.Add("GET", "/semaphores/held", "", "")
	f.Add("POST", "/locks", "Content-Type: application/json", `{"resources": ["a", "b:1"], "ttl_ms": 100, "wait_ms": 5, "token": "`+tokenA+`"}`)
	f.Add("PATCH", "/locks?resource=a&resource=bb", "Lock-Token: "+tokenA, `{"ttl_ms": 60000}`)
	f.Add("DELETE", "/locks?resource=a.b&resource=c", "Lock-Token: "+tokenB, "")
	f.Add("GET", "/readyz", "", "")
	f.Add("GET", "/openapi.yaml", "", "")
	f.Add("GET", "/metrics", "", "")
	f.Add("GET", "/metrics", "Authorization: Bearer "+keyB, "")
	f.Add("POST", "/locks/job", "Authorization: Bearer "+keyA+"\nContent-Type: application/json", `{"ttl_ms": 1000}`)
	f.Add("POST", "/locks/job", "Authorization: Bearer "+keyA, `{"ttl_ms": 1000, "wait_ms": 10}`)
	f.Add("PATCH", "/locks/job", "Authorization: bearer "+keyB+"\nLock-Token: "+tokenA, "")
	f.Add("DELETE", "/locks/job", "Authorization: Bearer nope\nLock-Token: "+tokenA, "")
	f.Add("GET", "/locks/job", "Authorization: Basic "+keyA, "")
	f.Add("DELETE", "/locks/job", "Authorization: Bearer "+keyA+"\nAuthorization: Bearer "+keyA+"\nLock-Token: "+tokenA, "")

	f.Fuzz(func(t *testing.T, method, path, headers, body string) {
		for _, withKeys := range []bool{false, true} {
			r := fuzzRequest(method, path, headers, body)
			if r == nil {
				return // not a request net/http would build: nothing to serve
			}
			wantNS := ""
			cfg := Config{Metrics: NewMetrics()}
			if withKeys {
				cfg.Keys = testKeys(t)
				if e, ok := keyOf(r); ok {
					wantNS = e.namespace
				}
			}
			l := validatingLocker(t, wantNS)
			cfg.Locker = l
			h := New(cfg).Handler()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			checkFuzzResponse(t, r, w, l, withKeys)
		}
	})
}

// fuzzRequest returns the request of a fuzz input (headers holds
// "Name: value" lines), or nil if net/http would not build it.
func fuzzRequest(method, path, headers, body string) *http.Request {
	r, err := http.NewRequest(method, "http://redlockd.test"+path, strings.NewReader(body))
	if err != nil {
		return nil
	}
	for line := range strings.Lines(headers) {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			r.Header.Add(name, strings.TrimSpace(value))
		}
	}
	return r
}

// keyOf returns the test key that r carries in a valid Authorization header.
func keyOf(r *http.Request) (keyEntry, bool) {
	hdr := r.Header.Values("Authorization")
	if len(hdr) != 1 {
		return keyEntry{}, false
	}
	scheme, key, _ := strings.Cut(hdr[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return keyEntry{}, false
	}
	switch strings.TrimSpace(key) {
	case keyA:
		return keyEntry{name: "a", namespace: "ns-a"}, true
	case keyB:
		return keyEntry{name: "b", namespace: "ns-b"}, true
	}
	return keyEntry{}, false
}

// rejectedKinds are the problems of requests refused before any lock is
// touched.
var rejectedKinds = map[string]bool{
	"invalid-request": true, "unauthorized": true, "payload-too-large": true,
	"method-not-allowed": true, "too-many-waiters": true,
}

func checkFuzzResponse(t *testing.T, r *http.Request, w *httptest.ResponseRecorder, l *fakeLocker, withKeys bool) {
	t.Helper()
	method, path := r.Method, r.URL.String()
	if w.Code >= 500 {
		t.Errorf("%s %q (keys %v): got %d %s", method, path, withKeys, w.Code, w.Body)
	}
	if w.Header().Get("X-Request-Id") == "" {
		t.Errorf("%s %q: no X-Request-Id", method, path)
	}
	if ct := w.Header().Get("Content-Type"); w.Code >= 400 && ct != "application/problem+json" {
		t.Errorf("%s %q: got %d with Content-Type %q", method, path, w.Code, ct)
	}
	kind := ""
	if w.Code >= 400 {
		var p struct{ Type string }
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatalf("%s %q: problem body %q: %v", method, path, w.Body, err)
		}
		kind = strings.TrimPrefix(p.Type, problemTypePrefix)
	}
	calls := l.calls.Load()
	if (rejectedKinds[kind] || (kind == "not-found" && calls == 0)) && l.mutations.Load() != 0 {
		t.Errorf("%s %q: %d %s, yet the Locker was asked to change a lock", method, path, w.Code, kind)
	}
	if l.changed.Load() != 0 && (w.Code < 200 || w.Code > 299) {
		t.Errorf("%s %q: the Locker changed a lock, yet the answer is %d %s", method, path, w.Code, kind)
	}
	if withKeys {
		if _, ok := keyOf(r); !ok && calls != 0 {
			t.Errorf("%s %q: a request without a valid key reached the Locker (%d calls)", method, path, calls)
		}
		if _, ok := keyOf(r); !ok && (r.URL.Path == "/locks" || strings.HasPrefix(r.URL.Path, "/locks/") || strings.HasPrefix(r.URL.Path, "/semaphores/")) && w.Code != http.StatusUnauthorized {
			t.Errorf("%s %q: a request without a valid key got %d, want 401", method, path, w.Code)
		}
	}
}

// validatingLocker returns a fake Locker that fails the test when called
// with arguments the server should have rejected (openapi.yaml's rules), or
// with a namespace other than namespace; it refuses, as the coordinator does,
// a TTL or wait beyond the bounds of its configuration (checkBounds). Its answers depend on the resource, to reach the error
// paths. It counts its calls, those that ask to change a lock (Acquire,
// Extend, Release: mutations) and those that did (changed).
func validatingLocker(t *testing.T, namespace string) *fakeLocker {
	checkName := func(ns, resource string) {
		if ns != namespace || !redlock.ValidName(resource) {
			t.Errorf("invalid name %q/%q (want namespace %q)", ns, resource, namespace)
		}
	}
	checkTTL := func(ttl time.Duration) {
		if ttl < redlock.MinTTL {
			t.Errorf("invalid TTL %v", ttl)
		}
	}
	checkToken := func(token string) {
		if !redlock.ValidToken(token) {
			t.Errorf("invalid token %q", token)
		}
	}
	errFor := func(resource string) error {
		switch len(resource) % 4 {
		case 1:
			return &redlock.HeldError{Remaining: time.Duration(len(resource)) * time.Second}
		case 2:
			return redlock.ErrLockExpired
		case 3:
			return redlock.ErrHeldByOther
		}
		return nil
	}
	l := &fakeLocker{}
	mutate := func(err error) error {
		l.calls.Add(1)
		l.mutations.Add(1)
		if err == nil {
			l.changed.Add(1)
		}
		return err
	}
	l.AcquireFn = func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		checkName(o.Namespace, resource)
		checkTTL(o.TTL)
		if o.Wait < 0 {
			t.Errorf("invalid wait %v", o.Wait)
		}
		if err := checkBounds(o.TTL, o.Wait); err != nil {
			l.calls.Add(1)
			return redlock.Lock{}, err
		}
		if o.Token != "" {
			checkToken(o.Token)
		}
		if utf8.RuneCountInString(o.Owner) > redlock.MaxOwnerLen {
			t.Errorf("owner too long: %d", len(o.Owner))
		}
		if err := mutate(errFor(resource)); err != nil {
			return redlock.Lock{}, err
		}
		return testLock(resource, tokenA, o.TTL), nil
	}
	l.ReleaseFn = func(_ context.Context, namespace, resource, token string) error {
		checkName(namespace, resource)
		checkToken(token)
		return mutate(errFor(resource))
	}
	l.ExtendFn = func(_ context.Context, namespace, resource, token string, ttl time.Duration) (redlock.Lock, error) {
		checkName(namespace, resource)
		checkToken(token)
		checkTTL(ttl)
		if err := checkBounds(ttl, 0); err != nil {
			l.calls.Add(1)
			return redlock.Lock{}, err
		}
		if err := mutate(errFor(resource)); err != nil {
			return redlock.Lock{}, err
		}
		return testLock(resource, token, ttl), nil
	}
	l.InspectFn = func(_ context.Context, namespace, resource string) (redlock.Info, error) {
		l.calls.Add(1)
		checkName(namespace, resource)
		if len(resource)%2 == 0 {
			return redlock.Info{}, redlock.ErrNotHeld
		}
		return redlock.Info{Resource: resource, Fence: 1, Remaining: time.Second, HeldNodes: 3}, nil
	}
	l.ListFn = func(_ context.Context, o redlock.ListOptions) (redlock.Page, error) {
		l.calls.Add(1)
		if o.Namespace != namespace || !redlock.ValidPrefix(o.Prefix) || o.Limit < 1 || o.Limit > redlock.MaxListLimit {
			t.Errorf("invalid list options %+v (want namespace %q)", o, namespace)
		}
		if o.Cursor != "" {
			return redlock.Page{}, fmt.Errorf("%w: cursor is malformed", redlock.ErrInvalid)
		}
		return redlock.Page{Locks: []redlock.Info{{Resource: "a", Fence: 1, Remaining: time.Second, HeldNodes: 3}}, Next: "MC4wLjAu"}, nil
	}
	l.AcquirePermitFn = func(ctx context.Context, name string, o redlock.PermitOptions) (redlock.Permit, error) {
		if o.Limit < 1 || o.Limit > redlock.MaxLimit {
			t.Errorf("invalid limit %d", o.Limit)
		}
		if o.Limit == 3 { // another limit than the permits held
			return redlock.Permit{}, mutate(&redlock.LimitError{Limit: 2})
		}
		lock, err := l.AcquireFn(ctx, name, o.AcquireOptions)
		return redlock.Permit{Lock: lock, Limit: o.Limit}, err
	}
	l.ExtendPermitFn = func(ctx context.Context, namespace, name, token string, ttl time.Duration) (redlock.Permit, error) {
		lock, err := l.ExtendFn(ctx, namespace, name, token, ttl)
		return redlock.Permit{Lock: lock, Limit: 2, Index: 1}, err
	}
	l.ReleasePermitFn = l.ReleaseFn
	l.InspectSemaphoreFn = func(_ context.Context, namespace, name string) (redlock.SemaphoreInfo, error) {
		l.calls.Add(1)
		checkName(namespace, name)
		return redlock.SemaphoreInfo{Name: name, Limit: 2, Permits: []redlock.PermitInfo{{Index: 1, Fence: 1, Remaining: time.Second, HeldNodes: 3}}}, nil
	}
	checkNames := func(ns string, rs []string) {
		if len(rs) == 0 || len(rs) > redlock.MaxResources {
			t.Errorf("invalid resources %q", rs)
		}
		for i, r := range rs {
			checkName(ns, r)
			if slices.Contains(rs[:i], r) {
				t.Errorf("duplicate resource in %q", rs)
			}
		}
	}
	multi := func(rs []string, token string, ttl time.Duration) redlock.MultiLock {
		return redlock.MultiLock{Resources: rs, Token: token, Fences: make([]int64, len(rs)), TTL: ttl, Nodes: 5, Quorum: 3, Locked: 3}
	}
	l.AcquireMultiFn = func(_ context.Context, rs []string, o redlock.AcquireOptions) (redlock.MultiLock, error) {
		checkNames(o.Namespace, rs)
		checkTTL(o.TTL)
		if err := checkBounds(o.TTL, o.Wait); err != nil {
			l.calls.Add(1)
			return redlock.MultiLock{}, err
		}
		if err := mutate(errFor(rs[0])); err != nil {
			return redlock.MultiLock{}, err
		}
		return multi(rs, tokenA, o.TTL), nil
	}
	l.ReleaseMultiFn = func(_ context.Context, namespace string, rs []string, token string) error {
		checkNames(namespace, rs)
		checkToken(token)
		return mutate(errFor(rs[0]))
	}
	l.ExtendMultiFn = func(_ context.Context, namespace string, rs []string, token string, ttl time.Duration) (redlock.MultiLock, error) {
		checkNames(namespace, rs)
		checkToken(token)
		checkTTL(ttl)
		if err := checkBounds(ttl, 0); err != nil {
			l.calls.Add(1)
			return redlock.MultiLock{}, err
		}
		if err := mutate(errFor(rs[0])); err != nil {
			return redlock.MultiLock{}, err
		}
		return multi(rs, token, ttl), nil
	}
	l.StatusFn = func(context.Context) []redlock.NodeStatus {
		return []redlock.NodeStatus{{Addr: "a:1", Up: true}, {Addr: "b:1", Up: true}, {Addr: "c:1", Up: true}}
	}
	return l
}

// headerLines formats name, value pairs as "Name: value" lines.
func headerLines(pairs []string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		b.WriteString(pairs[i] + ": " + pairs[i+1] + "\n")
	}
	return b.String()
}
