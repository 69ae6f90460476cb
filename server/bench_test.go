package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/redlock"
)

// benchServer is a Server over a Locker that answers at once, logging at
// info to io.Discard as the real gateway logs: what the HTTP layer costs.
func benchServer(b *testing.B) http.Handler {
	f := newFake(b)
	lock := redlock.Lock{Resource: "bench", Token: redlock.NewToken(), Fence: 42, TTL: 30 * time.Second,
		Validity: 29 * time.Second, Start: time.Now(), Until: time.Now().Add(29 * time.Second), Nodes: 5, Quorum: 3, Locked: 5}
	f.AcquireFn = func(context.Context, string, redlock.AcquireOptions) (redlock.Lock, error) { return lock, nil }
	f.ReleaseFn = func(context.Context, string, string, string) error { return nil }
	return New(Config{Locker: f, Log: zerolog.New(io.Discard)}).Handler()
}

func BenchmarkAcquireHandler(b *testing.B) {
	h := benchServer(b)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/locks/bench", strings.NewReader(`{"ttl_ms":30000,"owner":"bench"}`))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

func BenchmarkAcquireHandlerEmptyBody(b *testing.B) {
	h := benchServer(b)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/locks/bench", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

func BenchmarkReleaseHandler(b *testing.B) {
	h := benchServer(b)
	tok := redlock.NewToken()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodDelete, "/locks/bench", nil)
		r.Header.Set("Lock-Token", tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusNoContent {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkValidateBody is an acquire's body read, decoded and validated
// against its schema in openapi.yaml, as validateRequest does.
func BenchmarkValidateBody(b *testing.B) {
	body := `{"ttl_ms":30000,"wait_ms":1000,"owner":"host-1/4242"}`
	op := mustOperations()["POST /locks/{resource}"]
	r := httptest.NewRequest(http.MethodPost, "/locks/bench", nil)
	rctx := chi.NewRouteContext()
	rctx.URLParams.Add("resource", "bench")
	b.ReportAllocs()
	for b.Loop() {
		r.Body = io.NopCloser(strings.NewReader(body))
		if err := op.validate(r, rctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHotPathHandler is one acquire and one release as the gateway
// serves them under load: metrics on, the acquire body without a
// Content-Type, the release with its Lock-Token.
func BenchmarkHotPathHandler(b *testing.B) {
	f := newFake(b)
	lock := redlock.Lock{Resource: "bench", Token: redlock.NewToken(), Fence: 42, TTL: 10 * time.Second,
		Validity: 9 * time.Second, Start: time.Now(), Until: time.Now().Add(9 * time.Second), Nodes: 5, Quorum: 3, Locked: 5}
	f.AcquireFn = func(context.Context, string, redlock.AcquireOptions) (redlock.Lock, error) { return lock, nil }
	f.ReleaseFn = func(context.Context, string, string, string) error { return nil }
	h := New(Config{Locker: f, Log: zerolog.New(io.Discard), Metrics: NewMetrics()}).Handler()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/locks/bench", strings.NewReader(`{"ttl_ms":10000,"wait_ms":0}`))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("acquire: status %d: %s", w.Code, w.Body)
		}
		r = httptest.NewRequest(http.MethodDelete, "/locks/bench", nil)
		r.Header.Set("Lock-Token", lock.Token)
		w = httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusNoContent {
			b.Fatalf("release: status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkObserveRequest is the metrics of one acquire and its lock
// operation.
func BenchmarkObserveRequest(b *testing.B) {
	m := NewMetrics()
	b.ReportAllocs()
	for b.Loop() {
		m.observeOp("acquire", time.Now())
		m.observeRequest("/locks/{resource}", http.MethodPost, http.StatusCreated, time.Millisecond, "acquired")
	}
}
