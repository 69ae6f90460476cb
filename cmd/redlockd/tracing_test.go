package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/redlockd/redlockd/internal/redistest"
	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/server"
)

func TestTracingFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		on, bad bool
	}{
		{env: nil},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": " OTLP "}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "false"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, bad: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, bad: true},
		// The traces' own protocol overrides the general one, either way.
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
	} {
		// Through ParseServeFlags, as redlockd reads them.
		c, err := ParseServeFlags(nil, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if _, isUsage := errors.AsType[*UsageError](err); isUsage != tc.bad || (err != nil && !tc.bad) {
			t.Errorf("%v: error %v, want one: %v", tc.env, err, tc.bad)
		}
		if err == nil && c.Tracing != tc.on {
			t.Errorf("%v: tracing %v, want %v", tc.env, c.Tracing, tc.on)
		}
	}
}

// spanChan is a span processor that sends every span that ends.
type spanChan chan sdktrace.ReadOnlySpan

func (c spanChan) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c spanChan) OnEnd(s sdktrace.ReadOnlySpan)                   { c <- s }
func (c spanChan) Shutdown(context.Context) error                  { return nil }
func (c spanChan) ForceFlush(context.Context) error                { return nil }

// tracedGateway returns the handler of a gateway over n real redis-servers,
// traced as redlockd traces them (traceNodes, server.Config.Tracer) by tp,
// and the nodes' addresses.
func tracedGateway(t *testing.T, n int, tp trace.TracerProvider) (http.Handler, []string) {
	t.Helper()
	var nodes []*redis.Options
	var addrs []string
	for _, s := range redistest.Cluster(t, n) {
		nodes, addrs = append(nodes, s.Options()), append(addrs, s.Addr())
	}
	opts := redlock.Options{Quarantine: redlock.QuarantineOff, NodeTimeout: testNodeTimeout, ClientHook: traceNodes(tp), Observer: spanEvents{}}
	coord, err := redlock.New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coord.Close() })
	coord.Warm(context.Background(), patience)
	return server.New(server.Config{Locker: coord, Tracer: tp}).Handler(), addrs
}

func acquire(t *testing.T, h http.Handler, resource string, header http.Header) (token string, fence int64) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/locks/"+resource, strings.NewReader(`{"ttl_ms":5000}`))
	r.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var lock struct {
		Token        string `json:"token"`
		FencingToken int64  `json:"fencing_token"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &lock); w.Code != http.StatusCreated || err != nil || lock.Token == "" {
		t.Fatalf("acquire: %d %s", w.Code, w.Body)
	}
	return lock.Token, lock.FencingToken
}

// TestTracingSpans: one acquire makes a server span named by its route, with
// its outcome and fencing token, continuing the caller's trace, and under it
// a span per node command carrying the node's address; no span holds the
// lock token.
func TestTracingSpans(t *testing.T) {
	spans := make(spanChan, 64)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	h, addrs := tracedGateway(t, 3, tp)

	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	token, fence := acquire(t, h, "x", http.Header{"Traceparent": {parent}})

	var srv sdktrace.ReadOnlySpan
	var nodeSpans []sdktrace.ReadOnlySpan
	seen := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for srv == nil || len(seen) < len(addrs) { // the slowest node may answer after the request
		select {
		case s := <-spans:
			if s.SpanKind() == trace.SpanKindServer {
				srv = s
				continue
			}
			nodeSpans = append(nodeSpans, s)
			attrs := attrMap(s)
			seen[attrs["server.address"]+":"+attrs["server.port"]] = true
		case <-timeout:
			t.Fatalf("spans: server %v, nodes seen %v of %v", srv != nil, seen, addrs)
		}
	}
	if got := srv.Name(); got != "POST /locks/{resource}" {
		t.Errorf("server span name %q", got)
	}
	if got := srv.SpanContext().TraceID().String(); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("trace id %s: the incoming traceparent's was not continued", got)
	}
	if got := srv.Parent().SpanID().String(); got != "b7ad6b7169203331" {
		t.Errorf("server span's parent %s, want the traceparent's", got)
	}
	a := attrMap(srv)
	for k, want := range map[string]string{"http.route": "/locks/{resource}", "redlockd.outcome": "acquired",
		"redlockd.resource": "x", "redlockd.fencing_token": strconv.FormatInt(fence, 10), "http.response.status_code": "201"} {
		if a[k] != want {
			t.Errorf("server span %s=%q, want %q (all: %v)", k, a[k], want, a)
		}
	}
	if ev := spanEvent(srv, "redlock.decided"); ev["redlock.outcome"] != "acquired" || ev["redlock.round"] != "true" {
		t.Errorf("server span's redlock.decided event %v, want acquired by a round (events: %v)", ev, srv.Events())
	}
	for _, addr := range addrs {
		if !seen[addr] {
			t.Errorf("no span for node %s", addr)
		}
	}
	for _, s := range append(nodeSpans, srv) {
		if s != srv && (s.Parent().SpanID() != srv.SpanContext().SpanID() || s.SpanContext().TraceID() != srv.SpanContext().TraceID()) {
			t.Errorf("node span %q is not a child of the request span", s.Name())
		}
		for k, v := range attrMap(s) {
			if strings.Contains(v, token) {
				t.Errorf("span %q: attribute %s holds the lock token", s.Name(), k)
			}
		}
	}
}

// TestTracingWaitEvents: an acquire that waits in vain carries, on its
// server span, the decisions of its rounds (held) and the end of its wait.
func TestTracingWaitEvents(t *testing.T) {
	spans := make(spanChan, 64)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	h, _ := tracedGateway(t, 3, tp)
	acquire(t, h, "w", nil)

	r := httptest.NewRequest(http.MethodPost, "/locks/w", strings.NewReader(`{"ttl_ms":5000,"wait_ms":100}`))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusConflict {
		t.Fatalf("waiting acquire of a held lock: %d %s", w.Code, w.Body)
	}
	timeout := time.After(10 * time.Second)
	for servers := 0; servers < 2; {
		select {
		case s := <-spans:
			if s.SpanKind() != trace.SpanKindServer {
				continue
			}
			if servers++; servers == 1 {
				continue // the holder's
			}
			if ev := spanEvent(s, "redlock.decided"); ev["redlock.outcome"] != "held" || ev["redlock.round"] != "true" {
				t.Errorf("redlock.decided %v, want held by a round (events: %v)", ev, s.Events())
			}
			if ev := spanEvent(s, "redlock.waited"); ev["redlock.acquired"] != "false" || ev["redlock.waited_ms"] == "" {
				t.Errorf("redlock.waited %v, want not acquired (events: %v)", ev, s.Events())
			}
		case <-timeout:
			t.Fatalf("%d server spans, want 2", servers)
		}
	}
}

// spanEvent is the attributes of s's first event named name (nil: none).
func spanEvent(s sdktrace.ReadOnlySpan, name string) map[string]string {
	for _, e := range s.Events() {
		if e.Name == name {
			m := map[string]string{}
			for _, kv := range e.Attributes {
				m[string(kv.Key)] = kv.Value.String()
			}
			return m
		}
	}
	return nil
}

func attrMap(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// TestMainTracingOff: `redlockd serve` without tracing instruments nothing:
// not even a global tracer provider sees a span, of the request or of its
// node commands, although the request carries a traceparent.
func TestMainTracingOff(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	old := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { otel.SetTracerProvider(old) })

	m, _ := openDevMain(t, nil)
	req, _ := http.NewRequest(http.MethodPost, "http://"+m.Addr()+"/locks/x", strings.NewReader(`{"ttl_ms":5000}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /locks/x: %d", resp.StatusCode)
	}
	if err := m.Close(); err != nil { // its node commands are over
		t.Fatal(err)
	}
	if got := exp.GetSpans(); len(got) != 0 {
		t.Errorf("%d spans with tracing off: %v", len(got), got)
	}
}

// TestMainTracingOTLP: with tracing on, `redlockd serve` (dev mode) sends its
// spans to the OTLP/HTTP endpoint of OTEL_EXPORTER_OTLP_ENDPOINT, all of them
// by the end of its graceful shutdown, as service redlockd.
func TestMainTracingOTLP(t *testing.T) {
	got := make(chan *collectortrace.ExportTraceServiceRequest, 64)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		got <- req
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer rcv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	m, logs := openDevMain(t, func(c *Config) { c.Tracing = true })
	resp, err := http.Post("http://"+m.Addr()+"/locks/x", "application/json", strings.NewReader(`{"ttl_ms":5000}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for len(got) > 0 {
		for _, rs := range (<-got).ResourceSpans {
			for _, kv := range rs.Resource.Attributes {
				if kv.Key == "service.name" && kv.Value.GetStringValue() != "redlockd" {
					t.Errorf("service.name %v", kv.Value)
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names[s.Name]++
				}
			}
		}
	}
	nodeSpans := 0
	for n, c := range names {
		if strings.Contains(n, "evalsha") {
			nodeSpans += c
		}
	}
	if names["POST /locks/{resource}"] != 1 || nodeSpans < devNodeCount {
		t.Errorf("exported spans %v: want the request's and one per node at least\nlogs:\n%s", names, logs)
	}
}
