// Package server is the HTTP adapter of redlockd: a chi router that serves
// the API generated in package api (from openapi.yaml) over a Locker, with
// request ids, access logs, body limits, strict JSON decoding and
// application/problem+json errors.
package server

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// Limits of the server alone; the limits of locks (TTLs, waits, names) and
// their defaults are package redlock's.
const (
	DefaultMaxWaiters = 10000    // Config.MaxWaiters's default
	MaxHeaderBytes    = 16 << 10 // for http.Server.MaxHeaderBytes
)

// methods are the HTTP methods the API knows, in the order of an Allow header.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPatch,
	http.MethodDelete, http.MethodPut, http.MethodOptions}

// Config configures a Server. The zero value of each field but Locker means
// its default. The limits should be the coordinator's (redlock.Options):
// requests are checked against openapi.yaml here, and against the bounds of
// the configuration (max TTL, max wait) by the coordinator.
type Config struct {
	// Locker takes, extends, releases and inspects locks. Required.
	Locker Locker
	// Log receives one line per request and every internal error; it never
	// receives tokens. Default: the zero Logger, which logs nothing.
	Log zerolog.Logger
	// DefaultTTL is the TTL of a lock when a request gives none, MaxTTL the
	// largest TTL (it bounds Retry-After) and MaxWait the largest wait_ms a
	// request may ask for (checked here only when the waiting slots are
	// full, as such an acquire reaches the coordinator without its wait).
	// Defaults: redlock.DefaultTTL, DefaultMaxTTL and DefaultMaxWait.
	DefaultTTL, MaxTTL, MaxWait time.Duration
	// MaxWaiters bounds the acquires with wait_ms > 0 in progress at once;
	// one more gets 503 too-many-waiters. Default: 10000.
	MaxWaiters int
	// MaxWaitersPerNamespace bounds those of one namespace (one tenant), so
	// that one cannot take every slot of MaxWaiters. Default: with Keys, a
	// quarter of MaxWaiters (at least 1); without, MaxWaiters (every caller
	// is in namespace ""). At most MaxWaiters.
	MaxWaitersPerNamespace int
	// Keys are the API keys. With at least one, every /locks and /semaphores request needs
	// "Authorization: Bearer <key>" and reaches only its key's namespace.
	// Default: none, no authentication (every caller is in namespace "").
	Keys *Keys
	// MetricsAuth makes GET /metrics need an API key too (any key); it has
	// no effect without Keys.
	MetricsAuth bool
	// Metrics, if set, are served at GET /metrics and fed by every request;
	// see NewMetrics. Default: none, /metrics answers 404.
	Metrics *Metrics
	// Tracer, if set, traces every request: a server span each, named by
	// its route, continuing an incoming W3C traceparent; see traced.
	// Default: none, and nothing is wrapped.
	Tracer trace.TracerProvider
	// Version is the version label of redlockd_build_info, as `redlockd
	// version` prints it. Default: empty.
	Version string
}

// Server serves the redlockd HTTP API. It implements
// api.StrictServerInterface; use Handler to serve it.
type Server struct {
	cfg Config // with the defaults filled in

	// waiting counts the acquires with wait_ms > 0 in progress, nsWaiting
	// those of each namespace that has any; waitMu guards both.
	waiting   atomic.Int64
	waitMu    sync.Mutex
	nsWaiting map[string]int

	// drain is cancelled by BeginShutdown.
	drain     context.Context
	stopDrain context.CancelFunc

	// unready is the last /readyz answer for want of a quorum (see noteReady).
	unready atomic.Bool
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	cfg.DefaultTTL = cmp.Or(cfg.DefaultTTL, redlock.DefaultTTL)
	cfg.MaxTTL = cmp.Or(cfg.MaxTTL, redlock.DefaultMaxTTL)
	cfg.MaxWait = cmp.Or(cfg.MaxWait, redlock.DefaultMaxWait)
	cfg.MaxWaiters = cmp.Or(cfg.MaxWaiters, DefaultMaxWaiters)
	cfg.MaxWaitersPerNamespace = min(cfg.MaxWaitersPerNamespace, cfg.MaxWaiters)
	if cfg.MaxWaitersPerNamespace <= 0 {
		cfg.MaxWaitersPerNamespace = cfg.MaxWaiters
		if cfg.Keys.Len() > 0 {
			cfg.MaxWaitersPerNamespace = max(cfg.MaxWaiters/4, 1)
		}
	}
	s := &Server{cfg: cfg, nsWaiting: map[string]int{}}
	s.drain, s.stopDrain = context.WithCancel(context.Background())
	if cfg.Metrics != nil {
		cfg.Metrics.watch(s)
	}
	return s
}

// Handler returns the HTTP handler of the whole API: the generated routes on
// a chi router, behind the middlewares of request ids, access log, panics,
// API keys and body limits, with validateRequest checking requests against
// openapi.yaml, and in
// otelhttp with Config.Tracer. Every error body is made by writeProblem.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.begin, hlog.AccessHandler(s.logRequest), s.recoverer, s.authenticate, s.limitBody)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { s.writeProblem(w, r, errNoRoute) })
	r.MethodNotAllowed(s.methodNotAllowed)

	strict := api.NewStrictHandlerWithOptions(s, nil, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc:  s.bodyError,
		ResponseErrorHandlerFunc: s.writeProblem,
	})
	api.HandlerWithOptions(strict, api.ChiServerOptions{
		BaseRouter:       r,
		Middlewares:      []api.MiddlewareFunc{s.validateRequest(mustOperations())},
		ErrorHandlerFunc: s.paramError,
	})
	r.Method(http.MethodGet, "/metrics", s.metricsHandler()) // promhttp, not generated: see api/cfg.yaml
	routeHead(r)
	if s.cfg.Tracer != nil {
		return traced(r, s.cfg.Tracer)
	}
	return r
}

// takeWaiter takes a waiting slot for an acquire of namespace ns, or returns
// errNamespaceWaiters or errTooManyWaiters. Give a slot taken back with
// leaveWaiter once the acquire ends, however it ends.
func (s *Server) takeWaiter(ns string) error {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	switch {
	case s.nsWaiting[ns] >= s.cfg.MaxWaitersPerNamespace && s.cfg.MaxWaitersPerNamespace < s.cfg.MaxWaiters:
		return errNamespaceWaiters
	case s.waiting.Load() >= int64(s.cfg.MaxWaiters):
		return errTooManyWaiters
	}
	s.nsWaiting[ns]++
	s.waiting.Add(1)
	return nil
}

// leaveWaiter gives back a slot of takeWaiter.
func (s *Server) leaveWaiter(ns string) {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if s.nsWaiting[ns]--; s.nsWaiting[ns] == 0 {
		delete(s.nsWaiting, ns)
	}
	s.waiting.Add(-1)
}

// routeHead routes HEAD on every GET route of r to the GET's handler, for
// uptime probes and curl -I (net/http drops the body). A route, unlike
// chi's middleware.GetHead, costs other requests nothing and puts HEAD in
// the Allow header of a 405.
func routeHead(r chi.Router) {
	for _, rt := range r.Routes() { // a copy: r may change while it is read
		if h, ok := rt.Handlers[http.MethodGet]; ok {
			r.Method(http.MethodHead, rt.Pattern, h)
		}
	}
}

// methodNotAllowed answers 405 with the Allow header listing the methods the
// path supports (HEAD with every GET: see routeHead).
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	path := cmp.Or(r.URL.RawPath, r.URL.Path)
	var allow []string
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.Routes != nil {
		for _, m := range methods {
			if rctx.Routes.Match(chi.NewRouteContext(), m, path) {
				allow = append(allow, m)
			}
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	s.writeProblem(w, r, errNoMethod)
}

// BeginShutdown starts a graceful shutdown: acquires that are waiting for a
// lock and every new /locks request get 503 shutting-down, and /readyz reports
// unready. Requests already running otherwise finish. Call it before
// http.Server.Shutdown, which waits for them. It may be called more than once.
func (s *Server) BeginShutdown() { s.stopDrain() }
