package server

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traced wraps h in otelhttp: a server span per request, continuing the
// trace of an incoming W3C traceparent header. The span is named by the
// method alone until traceRequest names it by its route.
func traced(h http.Handler, tp trace.TracerProvider) http.Handler {
	return otelhttp.NewHandler(h, "redlockd",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// traceRequest names the request's span (if it is traced) "METHOD route",
// never by its path, and adds what the access log shows of the request: its
// route, resource, outcome and the fencing token of a lock answer; never a
// lock token or a header.
func traceRequest(r *http.Request, route, resource, outcome string, fence int64) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	if route != "" {
		span.SetName(r.Method + " " + route)
		span.SetAttributes(attribute.String("http.route", route))
	}
	if resource != "" {
		span.SetAttributes(attribute.String("redlockd.resource", resource))
	}
	span.SetAttributes(attribute.String("redlockd.outcome", outcome))
	if fence != 0 {
		span.SetAttributes(attribute.Int64("redlockd.fencing_token", fence))
	}
}
