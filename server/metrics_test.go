package server

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/promtest"
	"github.com/redlockd/redlockd/redlock"
)

// parseMetrics parses a Prometheus text exposition.
func parseMetrics(t testing.TB, text string) promtest.Samples {
	t.Helper()
	ss, err := promtest.Parse(text)
	if err != nil {
		t.Fatalf("bad metrics: %v", err)
	}
	return ss
}

// metricValue returns the sum of the samples called name whose labels
// include labels (name=value pairs), and whether there was any.
func metricValue(samples promtest.Samples, name string, labels ...string) (float64, bool) {
	return samples.Sum(name, labels...)
}

// scrape gets /metrics from h and parses it.
func scrape(t testing.TB, h http.Handler, headers ...string) promtest.Samples {
	t.Helper()
	w := serve(t, h, request{method: "GET", target: "/metrics", headers: headers})
	if w.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	return parseMetrics(t, w.Body.String())
}

func TestMetrics(t *testing.T) {
	f := newFake(t)
	f.AcquireFn = func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		if resource == "held" {
			return redlock.Lock{}, &redlock.HeldError{Remaining: time.Second}
		}
		if resource == "down" {
			return redlock.Lock{}, redlock.ErrQuorumUnavailable
		}
		return testLock(resource, tokenA, o.TTL), nil
	}
	f.ReleaseFn = func(context.Context, string, string, string) error { return nil }
	f.StatusFn = func(context.Context) []redlock.NodeStatus {
		return []redlock.NodeStatus{
			{Addr: "10.0.0.1:6379", Up: true},
			{Addr: "10.0.0.2:6379", Up: false},
			{Addr: "10.0.0.3:6379", Up: true, QuarantinedUntil: time.Now().Add(time.Minute)},
		}
	}
	m := NewMetrics()
	h := New(Config{Locker: f, Metrics: m}).Handler()
	// The coordinator's events, as it tells its Observer: 4 waiters queued
	// (5 joined, 1 left), 3 rounds of which 1 split the votes, a census.
	ctx := t.Context()
	for _, d := range []int{1, 1, 1, 1, 1, -1} {
		m.Waiting(ctx, d)
	}
	m.Decided(ctx, redlock.Decision{Outcome: redlock.OutcomeAcquired, Round: true})
	m.Decided(ctx, redlock.Decision{Outcome: redlock.OutcomeHeld, Round: true, Split: true})
	m.Decided(ctx, redlock.Decision{Outcome: redlock.OutcomeHeld})
	m.Decided(ctx, redlock.Decision{Outcome: redlock.OutcomeUnavailable, Round: true})
	m.Census(redlock.Census{Node: "10.0.0.1:6379", At: time.Now(), Keys: map[string]int{"": 3, "tenant": 5}})

	before := scrape(t, h)
	for _, name := range []string{
		"redlockd_acquisitions_total", "redlockd_lock_operation_duration_seconds_count", "redlockd_waiters",
		"redlockd_wait_duration_seconds_count", "redlockd_node_up", "redlockd_node_slow", "redlockd_node_quarantined", "redlockd_quorum",
		"redlockd_acquire_rounds_total", "redlockd_split_votes_total", "go_goroutines", "process_cpu_seconds_total",
	} {
		if _, ok := metricValue(before, name); !ok {
			t.Errorf("no %s before any request", name)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"redlockd_waiters", nil, 4},
		{"redlockd_acquire_rounds_total", nil, 3},
		{"redlockd_split_votes_total", nil, 1},
		{"redlockd_keys", []string{"namespace", ""}, 3},
		{"redlockd_keys", []string{"namespace", "tenant"}, 5},
	} {
		if v, _ := metricValue(before, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v (from the Observer's events)", c.name, c.labels, v, c.want)
		}
	}
	for node, want := range map[string][2]float64{"10.0.0.1:6379": {1, 0}, "10.0.0.2:6379": {0, 0}, "10.0.0.3:6379": {1, 1}} {
		up, _ := metricValue(before, "redlockd_node_up", "node", node)
		q, _ := metricValue(before, "redlockd_node_quarantined", "node", node)
		if up != want[0] || q != want[1] {
			t.Errorf("node %s: up %v quarantined %v, want %v", node, up, q, want)
		}
	}

	serve(t, h, request{method: "POST", target: "/locks/job"})
	serve(t, h, request{method: "POST", target: "/locks/held"})
	serve(t, h, request{method: "POST", target: "/locks/down"})
	serve(t, h, request{method: "POST", target: "/locks/bad", body: "{"})
	serve(t, h, request{method: "DELETE", target: "/locks/job", headers: []string{"Lock-Token", tokenA}})
	serve(t, h, request{method: "BREW", target: "/locks/job"})
	serve(t, h, request{method: "GET", target: "/no/such/path"})
	m.Waited(ctx, 1500*time.Millisecond, true)
	m.NodeCommand(ctx, "10.0.0.1:6379", time.Millisecond, nil)
	m.NodeCommand(ctx, "10.0.0.1:6379", 50*time.Millisecond, context.DeadlineExceeded)

	after := scrape(t, h)
	delta := func(name string, labels ...string) float64 {
		a, _ := metricValue(after, name, labels...)
		b, _ := metricValue(before, name, labels...)
		return a - b
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"redlockd_acquisitions_total", []string{"outcome", "acquired"}, 1},
		{"redlockd_acquisitions_total", []string{"outcome", "held"}, 1},
		{"redlockd_acquisitions_total", []string{"outcome", "unavailable"}, 1},
		{"redlockd_acquisitions_total", []string{"outcome", "invalid"}, 1},
		{"redlockd_http_requests_total", []string{"route", "/locks/{resource}", "method", "POST", "status", "201"}, 1},
		{"redlockd_http_requests_total", []string{"route", "/locks/{resource}", "method", "POST", "status", "409"}, 1},
		{"redlockd_http_requests_total", []string{"route", "/locks/{resource}", "method", "DELETE", "status", "204"}, 1},
		{"redlockd_http_requests_total", []string{"route", "/locks/{resource}", "method", "other", "status", "405"}, 1},
		{"redlockd_http_requests_total", []string{"route", "unmatched", "method", "GET", "status", "404"}, 1},
		{"redlockd_http_requests_total", []string{"route", "/metrics", "method", "GET", "status", "200"}, 1},
		{"redlockd_http_request_duration_seconds_count", []string{"route", "/locks/{resource}", "method", "POST"}, 4},
		{"redlockd_lock_operation_duration_seconds_count", []string{"op", "acquire"}, 3},
		{"redlockd_lock_operation_duration_seconds_count", []string{"op", "release"}, 1},
		{"redlockd_wait_duration_seconds_count", []string{"acquired", "true"}, 1},
		{"redlockd_wait_duration_seconds_sum", []string{"acquired", "true"}, 1.5},
		{"redlockd_node_command_duration_seconds_count", []string{"node", "10.0.0.1:6379"}, 2},
		{"redlockd_node_command_errors_total", []string{"node", "10.0.0.1:6379"}, 1},
	} {
		if got := delta(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, s := range after {
		if v := s.Labels["method"]; v == "BREW" {
			t.Errorf("client method in a label: %+v", s)
		}
	}
}

// TestMetricsOff checks /metrics answers 404 without Metrics.
func TestMetricsOff(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	checkProblem(t, serve(t, h, request{method: "GET", target: "/metrics"}), 404, "not-found")
}

// TestMetricsFormats: /metrics answers OpenMetrics to an Accept that asks
// for it and gzip to an Accept-Encoding that allows it, and
// redlockd_build_info carries Config.Version, a revision label and the Go
// version.
func TestMetricsFormats(t *testing.T) {
	f := newFake(t)
	f.StatusFn = func(context.Context) []redlock.NodeStatus { return nil }
	h := New(Config{Locker: f, Metrics: NewMetrics(), Version: "v9.8.7"}).Handler()
	hasBuildInfo := func(what string, ss promtest.Samples) {
		t.Helper()
		for _, s := range ss {
			if _, rev := s.Labels["revision"]; s.Name == "redlockd_build_info" && s.Value == 1 && rev &&
				s.Labels["version"] == "v9.8.7" && s.Labels["goversion"] == runtime.Version() {
				return
			}
		}
		t.Errorf("%s: no redlockd_build_info{version=v9.8.7,revision,goversion=%s} 1", what, runtime.Version())
	}
	hasBuildInfo("text", scrape(t, h))

	w := serve(t, h, request{method: "GET", target: "/metrics", headers: []string{"Accept", "application/openmetrics-text; version=1.0.0"}})
	if ct := w.Header().Get("Content-Type"); w.Code != 200 || !strings.HasPrefix(ct, "application/openmetrics-text; version=1.0.0") {
		t.Errorf("OpenMetrics: %d, Content-Type %q", w.Code, ct)
	}
	if body := w.Body.String(); !strings.HasSuffix(body, "# EOF\n") || !strings.Contains(body, `redlockd_build_info{goversion="`+runtime.Version()+`"`) {
		t.Errorf("OpenMetrics: no build_info or # EOF in\n%s", body)
	}

	w = serve(t, h, request{method: "GET", target: "/metrics", headers: []string{"Accept-Encoding", "gzip"}})
	if ce := w.Header().Get("Content-Encoding"); w.Code != 200 || ce != "gzip" {
		t.Fatalf("gzip: %d, Content-Encoding %q", w.Code, ce)
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	hasBuildInfo("gzip", parseMetrics(t, string(text)))
}

// TestMetricsSlowStatus checks that a scrape does not wait for a Locker
// whose Status hangs longer than nodeStatusTimeout.
func TestMetricsSlowStatus(t *testing.T) {
	f := newFake(t)
	f.StatusFn = func(ctx context.Context) []redlock.NodeStatus {
		<-ctx.Done()
		return []redlock.NodeStatus{{Addr: "a:1", Err: "not checked yet"}}
	}
	h := New(Config{Locker: f, Metrics: NewMetrics()}).Handler()
	start := time.Now()
	s := scrape(t, h)
	if d := time.Since(start); d > nodeStatusTimeout+2*time.Second {
		t.Errorf("scrape took %v", d)
	}
	if v, ok := metricValue(s, "redlockd_node_up", "node", "a:1"); !ok || v != 0 {
		t.Errorf("node_up %v %v", v, ok)
	}
}

func TestMaxWaiters(t *testing.T) {
	f := newFake(t)
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	m := NewMetrics()
	f.AcquireFn = func(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		if o.Wait > 0 {
			m.Waiting(ctx, 1) // as the coordinator tells its Observer
			defer m.Waiting(ctx, -1)
			entered <- struct{}{}
			<-release
		} else if resource == "x" { // held by the waiters' holder
			return redlock.Lock{}, &redlock.HeldError{}
		}
		return testLock(resource, tokenA, o.TTL), nil
	}
	f.StatusFn = func(context.Context) []redlock.NodeStatus { return nil }
	h := New(Config{Locker: f, MaxWaiters: 2, Metrics: m}).Handler()

	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			codes <- serve(t, h, request{method: "POST", target: "/locks/x", body: `{"wait_ms": 5000}`}).Code
		})
	}
	<-entered
	<-entered
	if v, _ := metricValue(scrape(t, h), "redlockd_waiters"); v != 2 {
		t.Errorf("waiters gauge %v, want 2 (as the Locker reported them)", v)
	}
	w := serve(t, h, request{method: "POST", target: "/locks/x", body: `{"wait_ms": 5000}`})
	p := checkProblem(t, w, 503, "too-many-waiters")
	if w.Header().Get("Retry-After") == "" || p.RetryAfterMs == nil {
		t.Errorf("no retry hint: %+v", p)
	}
	if !strings.Contains(p.Detail, "the gateway's limit") {
		t.Errorf("detail %q does not say which limit", p.Detail)
	}
	// Acquires that do not wait are not limited, and a waiting acquire of a
	// free lock needs no slot: it takes the lock at once.
	decode[map[string]any](t, serve(t, h, request{method: "POST", target: "/locks/z"}), 201)
	decode[map[string]any](t, serve(t, h, request{method: "POST", target: "/locks/y", body: `{"wait_ms": 5000}`}), 201)
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 201 {
			t.Errorf("waiter got %d", c)
		}
	}
	// The slots are free again.
	release = make(chan struct{})
	close(release)
	decode[map[string]any](t, serve(t, h, request{method: "POST", target: "/locks/y", body: `{"wait_ms": 5000}`}), 201)
	<-entered
	if v, _ := metricValue(scrape(t, h), "redlockd_acquisitions_total", "outcome", "too_many_waiters"); v != 1 {
		t.Errorf("too_many_waiters outcomes %v, want 1", v)
	}
}
