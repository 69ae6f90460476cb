package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/redlockd/redlockd/redlock"
)

// TestTracingSpanNames: a traced request's span is named by its route, never
// by its path (which holds the resource name), or by its method alone when
// no route matches; it carries the outcome, and never Authorization.
func TestTracingSpanNames(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	fake := newFake(t)
	fake.AcquireFn = func(context.Context, string, redlock.AcquireOptions) (redlock.Lock, error) {
		return redlock.Lock{}, redlock.ErrLockHeld
	}
	sum := sha256.Sum256([]byte("secret-key-0123456789abcdef"))
	keys, err := ParseKeys([]byte(`{"keys":[{"name":"app","namespace":"app","sha256":"` + hex.EncodeToString(sum[:]) + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Locker: fake, Keys: keys, Tracer: trace.NewTracerProvider(trace.WithSyncer(exp))}).Handler()
	auth := []string{"Authorization", "Bearer secret-key-0123456789abcdef"}
	for _, tc := range []struct {
		req           request
		name, outcome string
	}{
		{request{method: "POST", target: "/locks/secret-name", headers: auth}, "POST /locks/{resource}", "lock-held"},
		{request{method: "POST", target: "/locks/secret-name"}, "POST /locks/{resource}", "unauthorized"},
		{request{method: "GET", target: "/no/secret-name", headers: auth}, "GET", "not-found"},
	} {
		exp.Reset()
		serve(t, h, tc.req)
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%s %s: %d spans", tc.req.method, tc.req.target, len(spans))
		}
		s := spans[0]
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[string(kv.Key)] = kv.Value.String()
			if strings.Contains(kv.Value.String(), "secret-key") {
				t.Errorf("%s: attribute %s holds the API key", tc.req.target, kv.Key)
			}
		}
		if s.Name != tc.name || attrs["redlockd.outcome"] != tc.outcome {
			t.Errorf("%s %s: span %q outcome %q, want %q %q", tc.req.method, tc.req.target, s.Name, attrs["redlockd.outcome"], tc.name, tc.outcome)
		}
	}
}

// TestTracingOff: without Config.Tracer no request is traced, not even by
// a global tracer provider, and the caller's traceparent does not reach the
// Locker: the context it gets holds no span (with a tracer, the spans of
// the node commands would be children of the request's).
func TestTracingOff(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	old := otel.GetTracerProvider()
	otel.SetTracerProvider(trace.NewTracerProvider(trace.WithSyncer(exp)))
	t.Cleanup(func() { otel.SetTracerProvider(old) })
	fake := newFake(t)
	var got oteltrace.SpanContext
	fake.AcquireFn = func(ctx context.Context, _ string, _ redlock.AcquireOptions) (redlock.Lock, error) {
		got = oteltrace.SpanContextFromContext(ctx)
		return redlock.Lock{}, redlock.ErrLockHeld
	}
	_, h := newHandler(fake, nil)
	serve(t, h, request{method: "POST", target: "/locks/x",
		headers: []string{"Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}})
	if got.IsValid() {
		t.Errorf("the Locker's context holds span %v with tracing off", got)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("%d spans with tracing off: %v", len(spans), spans)
	}
}
