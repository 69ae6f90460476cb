package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/redlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingFromEnv reports whether the standard OpenTelemetry variables ask
// for traces: OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint with no
// exporter named; never with OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none. Only the OTLP/HTTP exporter is built in: another
// exporter or protocol is an error, not a silent loss of every span.
func tracingFromEnv(lookupEnv func(string) (string, bool)) (bool, error) {
	get := func(name string) string { v, _ := lookupEnv(name); return strings.ToLower(strings.TrimSpace(v)) }
	if get("OTEL_SDK_DISABLED") == "true" {
		return false, nil
	}
	switch exp := get("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return false, nil
	case "":
		if get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	case "otlp":
	default:
		return false, usageErrorf("OTEL_TRACES_EXPORTER=%s: redlockd exports traces with otlp only (or none)", exp)
	}
	// The traces' own variable, when set, overrides the general one.
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch p := get(name); p {
		case "":
			continue
		case "http/protobuf":
		default:
			return false, usageErrorf("%s=%s: redlockd exports traces over http/protobuf only", name, p)
		}
		break
	}
	return true, nil
}

// newTracerProvider returns the tracer provider of redlockd: spans batched
// to the OTLP/HTTP exporter, which reads OTEL_EXPORTER_OTLP_* itself (as the
// provider reads OTEL_TRACES_SAMPLER* and OTEL_BSP_*), from a resource with
// service.name "redlockd" and service.version version unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. Shut it down
// to flush its spans.
func newTracerProvider(ctx context.Context, version string) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "redlockd"), attribute.String("service.version", version)),
		resource.WithFromEnv()) // last: the variables win
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// traceNodes returns the redlock.Options.ClientHook that traces each node's
// commands with redisotel: a span per command (or per batch), with the
// node's address and port but without the command's arguments (they hold
// lock tokens), under the span of the request it serves. Commands that serve
// no request (health checks, release announcements) make no traces.
func traceNodes(tp trace.TracerProvider) func(*redis.Client) {
	return func(c *redis.Client) {
		_ = redisotel.InstrumentTracing(c, redisotel.WithTracerProvider(childSpans{tp}), // never fails for a *redis.Client
			redisotel.WithDBStatement(false), redisotel.WithCallerEnabled(false))
	}
}

// spanEvents is the redlock.Observer that writes the engine's decisions on
// the span of the request they serve: each acquire's outcome (and whether a
// round decided it, and split votes), and the end of a wait. Node commands
// have spans of their own (traceNodes).
type spanEvents struct{ redlock.NopObserver }

func (spanEvents) Decided(ctx context.Context, d redlock.Decision) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("redlock.decided", trace.WithAttributes(attribute.String("redlock.outcome", d.Outcome.String()),
			attribute.Bool("redlock.round", d.Round), attribute.Bool("redlock.split", d.Split)))
	}
}

func (spanEvents) Waited(ctx context.Context, took time.Duration, acquired bool) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("redlock.waited", trace.WithAttributes(attribute.Bool("redlock.acquired", acquired),
			attribute.Int64("redlock.waited_ms", took.Milliseconds())))
	}
}

// childSpans is a TracerProvider whose tracers start a span only under a
// span of the context (a non-recording one otherwise).
type childSpans struct{ trace.TracerProvider }

func (p childSpans) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childTracer{p.TracerProvider.Tracer(name, opts...)}
}

type childTracer struct{ trace.Tracer }

func (t childTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.Tracer.Start(ctx, name, opts...)
}

// tracerOrNil is tp as a server.Config.Tracer: nil, not a typed nil, without.
func tracerOrNil(tp *sdktrace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return nil
	}
	return tp
}
