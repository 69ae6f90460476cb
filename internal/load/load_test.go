package load

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockServer answers as the gateway does for uncontended cycles: POST
// /locks/{name} 201 with a token when free (409 when held), DELETE with the
// token 204. It counts what it saw.
type lockServer struct {
	mu       sync.Mutex
	held     map[string]string
	n        int
	released int
	bad      []string
}

func (s *lockServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := strings.TrimPrefix(r.URL.Path, "/locks/")
	switch r.Method {
	case http.MethodPost:
		if r.Header.Get("Content-Type") != "application/json" {
			s.bad = append(s.bad, "POST without Content-Type")
		}
		if _, ok := s.held[name]; ok {
			w.WriteHeader(http.StatusConflict)
			return
		}
		s.n++
		tok := fmt.Sprintf("tok%019d", s.n)
		s.held[name] = tok
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"resource":%q,"token":%q,"fencing_token":%d}`, name, tok, s.n)
	case http.MethodDelete:
		if tok, ok := s.held[name]; !ok || tok != r.Header.Get("Lock-Token") {
			s.bad = append(s.bad, "DELETE without the lock's token")
			w.WriteHeader(http.StatusConflict)
			return
		}
		delete(s.held, name)
		s.released++
		w.WriteHeader(http.StatusNoContent)
	}
}

// TestRawHTTPCycle: cycles over keep-alive connections, each lock released
// with its own token. An acquire still out when the run ends is given up
// (the server may have granted it: its lock is left to its TTL), so at most
// one lock per worker is left held.
func TestRawHTTPCycle(t *testing.T) {
	s := &lockServer{held: map[string]string{}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	cycle, err := RawHTTPCycle(srv.URL, "t-", 8, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	r := Run(t.Context(), "raw", 8, 300*time.Millisecond, cycle)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Cycles == 0 || r.Errors != 0 {
		t.Fatalf("%d cycles, %d errors (first: %s)", r.Cycles, r.Errors, r.FirstErr)
	}
	if len(s.held) > 8 || len(s.bad) != 0 || s.released < r.Cycles {
		t.Fatalf("after the run: held %v, wrong requests %q, released %d of %d cycles", s.held, s.bad, s.released, r.Cycles)
	}
	if !(r.P50 <= r.P90 && r.P90 <= r.P99 && r.P99 <= r.Max && r.P50 > 0) {
		t.Fatalf("percentiles out of order: %+v", r)
	}
}

// TestRunStopsBySelf: against a server that accepts and never answers, a
// run ends at its duration (the acquires out give up then, and are not
// counted as errors), and a release that gets no answer gives up after
// releaseTimeout.
func TestRunStopsBySelf(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	defer func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	cycle, err := RawHTTPCycle("http://"+ln.Addr().String(), "t-", 4, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := Run(t.Context(), "silent", 4, 300*time.Millisecond, cycle)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("a 300ms run against a silent server took %v", took)
	}
	if r.Cycles != 0 || r.Errors != 0 {
		t.Fatalf("%d cycles, %d errors (first: %s); want none: the acquires were cut off by the run's end", r.Cycles, r.Errors, r.FirstErr)
	}

	// A release that gets no answer: a server that grants the lock, then
	// goes silent.
	defer func(d time.Duration) { releaseTimeout = d }(releaseTimeout)
	releaseTimeout = 200 * time.Millisecond
	silentRelease := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"token":"abcdefghijklmnopqrstuv"}`)
			return
		}
		<-r.Context().Done() // never answers a release
	}))
	defer silentRelease.Close()
	cycle, err = RawHTTPCycle(silentRelease.URL, "t-", 1, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	r = Run(t.Context(), "silent release", 1, 50*time.Millisecond, cycle)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("a run whose release gets no answer took %v (release timeout %v)", took, releaseTimeout)
	}
}

// TestRunCountsErrors: a server that refuses every acquire gives errors,
// no cycles, and the first error's text.
func TestRunCountsErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	cycle, err := RawHTTPCycle(srv.URL, "t-", 2, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	r := Run(t.Context(), "500", 2, 200*time.Millisecond, cycle)
	if r.Cycles != 0 || r.Errors == 0 || r.FirstErr != "acquire: status 500" {
		t.Fatalf("%d cycles, %d errors, first %q", r.Cycles, r.Errors, r.FirstErr)
	}
}

// TestRunOnProcs: the cycles run with GOMAXPROCS at procs, and the process
// gets its own back afterwards; procs 0 leaves it alone.
func TestRunOnProcs(t *testing.T) {
	start := runtime.GOMAXPROCS(0)
	for _, procs := range []int{1, start + 1, 0} {
		want := procs
		if procs == 0 {
			want = start
		}
		var mu sync.Mutex
		seen := map[int]int{}
		r := RunOnProcs(t.Context(), "procs", 3, 50*time.Millisecond, procs, func(ctx context.Context, w int) error {
			mu.Lock()
			seen[runtime.GOMAXPROCS(0)]++
			mu.Unlock()
			time.Sleep(time.Millisecond)
			return nil
		})
		if r.Cycles == 0 || len(seen) != 1 || seen[want] == 0 {
			t.Errorf("procs %d: %d cycles saw GOMAXPROCS %v, want only %d", procs, r.Cycles, seen, want)
		}
		if got := runtime.GOMAXPROCS(0); got != start {
			t.Fatalf("procs %d: GOMAXPROCS %d after the run, want %d back", procs, got, start)
		}
	}
}
