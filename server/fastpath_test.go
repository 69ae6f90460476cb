package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/internal/promtest"
	"github.com/redlockd/redlockd/redlock"
)

// pathServer is a Server over a deterministic locker that records its
// calls, logging into log.
type pathServer struct {
	h     http.Handler
	log   syncBuffer
	mu    sync.Mutex
	calls []string
}

// newPathServer returns a pathServer whose requests take serveFast when
// they can (fast) or always the generated handlers, with API keys or not.
func newPathServer(t *testing.T, fast, keys bool) *pathServer {
	p := &pathServer{}
	until := time.Date(2026, 11, 22, 12, 0, 0, 123e6, time.UTC)
	record := func(format string, a ...any) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.calls = append(p.calls, fmt.Sprintf(format, a...))
	}
	f := newFake(t)
	f.AcquireFn = func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		record("acquire %q %+v", resource, o)
		switch resource {
		case "held":
			return redlock.Lock{}, &redlock.HeldError{Remaining: 1500 * time.Millisecond}
		case "down":
			return redlock.Lock{}, redlock.ErrQuorumUnavailable
		case "boom":
			return redlock.Lock{}, errors.New("boom")
		}
		return redlock.Lock{Resource: resource, Token: tokenA, Fence: 42, TTL: o.TTL, Validity: o.TTL - time.Millisecond,
			Until: until, Nodes: 5, Quorum: 3, Locked: 4}, nil
	}
	f.ReleaseFn = func(_ context.Context, namespace, resource, token string) error {
		record("release %q %q %q", namespace, resource, token)
		switch resource {
		case "held":
			return redlock.ErrHeldByOther
		case "gone":
			return redlock.ErrNotHeld
		case "down":
			return redlock.ErrQuorumUnavailable
		case "boom":
			return errors.New("boom")
		}
		return nil
	}
	f.ExtendFn = func(_ context.Context, namespace, resource, token string, ttl time.Duration) (redlock.Lock, error) {
		record("extend %q %q %q %v", namespace, resource, token, ttl)
		return redlock.Lock{Resource: resource, Token: token, Fence: 42, TTL: ttl, Until: until, Nodes: 5, Quorum: 3, Locked: 4}, nil
	}
	f.InspectFn = func(_ context.Context, namespace, resource string) (redlock.Info, error) {
		record("inspect %q %q", namespace, resource)
		return redlock.Info{}, redlock.ErrNotHeld
	}
	f.StatusFn = func(context.Context) []redlock.NodeStatus { return nil }
	cfg := Config{Locker: f, Log: zerolog.New(&p.log), Metrics: NewMetrics()}
	if keys {
		cfg.Keys = testKeys(t)
	}
	s := New(cfg)
	s.noFastPath = !fast
	p.h = s.Handler()
	return p
}

// fastPathRequests are requests near and on the fast path: every method of
// the lock routes and others, plain, escaped and odd paths, query strings,
// bodies good and bad, and Lock-Token, Content-Type, X-Request-Id and
// Authorization headers present, absent, repeated or bad.
func fastPathRequests() []request {
	methods := []string{http.MethodPost, http.MethodDelete, http.MethodGet, http.MethodPatch, http.MethodPut, http.MethodHead}
	paths := []string{"/locks/a", "/locks/held", "/locks/down", "/locks/boom", "/locks/gone", "/locks/x.y_z:1-2",
		"/locks/", "/locks", "/locks/a/", "/locks/a/b", "/locks//a", "/locks/a%2Fb", "/locks/%61", "/locks/a%20b",
		"/locks/a?x=1", "/locks/a?", "/locks/bad!name", "/locks/" + strings.Repeat("r", 200), "/locks/" + strings.Repeat("r", 201),
		"/lock/a", "/locks/../healthz", "/healthz", "/locks/.", "/locks/..", "/locks/%2E", "/locks/%2e%2e"}
	bodies := []string{"", "{}", " ", `{"ttl_ms":10000}`, `{"ttl_ms":10000,"wait_ms":0}`, `{"wait_ms":50}`, `{"ttl_ms":1}`,
		`{"ttl_ms":"1"}`, `{"bogus":1}`, `{"token":"` + tokenB + `","owner":"me"}`, `{"token":"short"}`, `[`, `null`,
		`{"ttl_ms":10000}x`, `{"owner":"` + strings.Repeat("o", 17<<10) + `"}`}
	headerSets := [][]string{
		nil,
		{"Lock-Token", tokenA},
		{"Lock-Token", tokenA, "Content-Type", "application/json"},
		{"Lock-Token", tokenA, "Lock-Token", tokenB},
		{"Lock-Token", ""},
		{"Lock-Token", "bad token"},
		{"Content-Type", "text/plain", "Lock-Token", tokenA},
		{"Content-Type", "application/json; charset=utf-8"},
		{"X-Request-Id", "req-1", "Lock-Token", tokenA},
		{"X-Request-Id", "bad id!", "Lock-Token", tokenA},
		{"Authorization", "Bearer " + keyA, "Lock-Token", tokenA},
		{"Authorization", "Bearer " + keyB},
		{"Authorization", "Bearer nope", "Lock-Token", tokenA},
	}
	var reqs []request
	for _, m := range methods {
		for _, p := range paths {
			for _, b := range bodies {
				if b != "" && m != http.MethodPost && m != http.MethodPatch && b != "{}" {
					continue // one body is enough for methods without one
				}
				for _, h := range headerSets {
					reqs = append(reqs, request{method: m, target: p, body: b, headers: h})
				}
			}
		}
	}
	return reqs
}

// volatile matches what may differ between two answers to one request: the
// request id and latency in the log, and the jittered retry_after_ms.
var volatile = regexp.MustCompile(`"req_id":"[^"]*"|"latency_ms":[0-9.e-]+|"retry_after_ms":[0-9]+`)

// TestFastPathSameAsGenerated serves each of fastPathRequests through
// serveFast where it applies and, on a second server, through the generated
// handlers, and checks that both answer alike: status, headers (but
// X-Request-Id, Date and Retry-After), body (but retry_after_ms), the calls to the locker, the log lines (but
// req_id and latency), and in the end the same metrics but durations. Then
// it checks that the fast path served a good share of them.
func TestFastPathSameAsGenerated(t *testing.T) {
	reqs := fastPathRequests()
	for _, keys := range []bool{false, true} {
		fast, slow := newPathServer(t, true, keys), newPathServer(t, false, keys)
		took := 0
		for _, req := range reqs {
			if _, ok := fastRoute(newRequest(req)); ok {
				took++
			}
			name := fmt.Sprintf("keys=%v %s %s body %.40q headers %q", keys, req.method, req.target, req.body, req.headers)
			sameOnBothPaths(t, name, fast, slow, func() *http.Request { return newRequest(req) })
		}
		mf, ms := scrape(t, fast.h), scrape(t, slow.h)
		if sf, ss := countSamples(mf), countSamples(ms); !reflect.DeepEqual(sf, ss) {
			t.Errorf("keys=%v: metrics differ\nfast %v\nslow %v", keys, sf, ss)
		}
		if took < len(reqs)/20 {
			t.Errorf("keys=%v: the fast path took %d of %d requests", keys, took, len(reqs))
		}
		t.Logf("keys=%v: %d requests, %d of them on the fast path", keys, len(reqs), took)
	}
}

// sameOnBothPaths serves the request newReq makes on fast and slow, and
// fails t unless both answered alike (see TestFastPathSameAsGenerated).
func sameOnBothPaths(t *testing.T, name string, fast, slow *pathServer, newReq func() *http.Request) {
	t.Helper()
	wf, ws := httptest.NewRecorder(), httptest.NewRecorder()
	fast.h.ServeHTTP(wf, newReq())
	slow.h.ServeHTTP(ws, newReq())
	if wf.Code != ws.Code || volatile.ReplaceAllString(wf.Body.String(), "") != volatile.ReplaceAllString(ws.Body.String(), "") {
		t.Fatalf("%s:\nfast %d %s\nslow %d %s", name, wf.Code, wf.Body, ws.Code, ws.Body)
	}
	if hf, hs := stableHeader(wf), stableHeader(ws); !reflect.DeepEqual(hf, hs) {
		t.Fatalf("%s: headers\nfast %v\nslow %v", name, hf, hs)
	}
	if !slices.Equal(fast.calls, slow.calls) {
		t.Fatalf("%s: locker calls\nfast %q\nslow %q", name, fast.calls, slow.calls)
	}
	lf, ls := volatile.ReplaceAllString(fast.log.String(), ""), volatile.ReplaceAllString(slow.log.String(), "")
	if lf != ls {
		t.Fatalf("%s: log\nfast %s\nslow %s", name, lf, ls)
	}
	fast.calls, slow.calls = nil, nil
	fast.log.reset()
	slow.log.reset()
}

// FuzzFastPathSameAsGenerated is TestFastPathSameAsGenerated for arbitrary
// requests (headers holds "Name: value" lines), with and without API keys.
func FuzzFastPathSameAsGenerated(f *testing.F) {
	reqs := fastPathRequests()
	for i := 0; i < len(reqs); i += 23 { // some of each kind
		f.Add(reqs[i].method, reqs[i].target, headerLines(reqs[i].headers), reqs[i].body)
	}
	f.Fuzz(func(t *testing.T, method, target, headers, body string) {
		newReq := func() *http.Request { return fuzzRequest(method, target, headers, body) }
		if newReq() == nil {
			return // not a request net/http would build
		}
		for _, keys := range []bool{false, true} {
			sameOnBothPaths(t, fmt.Sprintf("keys=%v", keys), newPathServer(t, true, keys), newPathServer(t, false, keys), newReq)
		}
	})
}

// stableHeader is w's header without X-Request-Id, Date and the jittered
// Retry-After.
func stableHeader(w *httptest.ResponseRecorder) http.Header {
	h := w.Header().Clone()
	h.Del("X-Request-Id")
	h.Del("Date")
	h.Del("Retry-After")
	return h
}

// TestFastPathParams pins the parameters of the operations serveFast
// serves, as generated from openapi.yaml: a path parameter and an optional
// body for an acquire, a path parameter and a Lock-Token header for a
// release. If one of them gains a parameter, serveFast must learn it.
func TestFastPathParams(t *testing.T) {
	for typ, want := range map[reflect.Type][]string{
		reflect.TypeFor[api.AcquireLockRequestObject](): {"Resource", "Body"},
		reflect.TypeFor[api.ReleaseLockRequestObject](): {"Resource", "Params"},
		reflect.TypeFor[api.ReleaseLockParams]():        {"LockToken"},
	} {
		var got []string
		for f := range typ.Fields() {
			got = append(got, f.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%v has fields %v, serveFast knows %v: update server/fastpath.go", typ, got, want)
		}
	}
	if reflect.TypeFor[api.AcquireLockJSONRequestBody]() != reflect.TypeFor[api.AcquireRequest]() {
		t.Errorf("the acquire's body is no longer an api.AcquireRequest: update server/fastpath.go")
	}
}

// countSamples returns the redlockd_ samples of ss but durations (histogram
// buckets and sums), as sorted name{labels} value lines.
func countSamples(ss promtest.Samples) []string {
	var out []string
	for _, s := range ss {
		if !strings.HasPrefix(s.Name, "redlockd_") || strings.HasSuffix(s.Name, "_bucket") || strings.HasSuffix(s.Name, "_sum") {
			continue
		}
		labels := make([]string, 0, len(s.Labels))
		for k, v := range s.Labels {
			labels = append(labels, k+"="+v)
		}
		slices.Sort(labels)
		out = append(out, fmt.Sprintf("%s{%s} %g", s.Name, strings.Join(labels, ","), s.Value))
	}
	slices.Sort(out)
	return out
}
