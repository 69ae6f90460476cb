package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"

	"github.com/redlockd/redlockd/redlock"
)

// requestIDRe matches an incoming X-Request-Id that is kept as it is.
var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// reqInfo is what the server learns of a request while serving it, for its
// access log line and metrics: who made it and how it ended. begin puts one
// in the request's context.
type reqInfo struct {
	caller  *keyEntry // the API key; nil when not authenticated
	outcome string
}

type reqInfoKey struct{}

// reqInfoOf returns ctx's request, or nil outside Handler.
func reqInfoOf(ctx context.Context) *reqInfo {
	rq, _ := ctx.Value(reqInfoKey{}).(*reqInfo)
	return rq
}

// setOutcome records the outcome of the request for the access log.
func setOutcome(ctx context.Context, outcome string) {
	if rq := reqInfoOf(ctx); rq != nil {
		rq.outcome = outcome
	}
}

// begin gives the request its id, sent back in X-Request-Id and added to
// the request's logger (hlog.NewHandler's): a well-formed incoming
// X-Request-Id or a new random one. It also puts the request's reqInfo in
// its context.
func (s *Server) begin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !requestIDRe.MatchString(id) {
			id = rand.Text()
		}
		w.Header().Set("X-Request-Id", id)
		hlog.FromRequest(r).UpdateContext(func(c zerolog.Context) zerolog.Context { return c.Str("req_id", id) })
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, &reqInfo{})))
	})
}

// A request whose client went away before its answer (a waiting acquire
// whose client was killed, say) is logged and counted with outcome
// outcomeClientGone and status statusClientGone at info level: it is no
// failure of the gateway or of Redis, and the client sees no status at all.
// The status is nginx's 499 "client closed request". The response, if any
// is still written, is the one problemFor makes.
const (
	outcomeClientGone = "client_gone"
	statusClientGone  = 499
)

// clientGone reports whether err ended request r because its client went
// away, and if so notes it for the access log. net/http cancels a
// request's context when its client goes away; a lock operation cut short
// that way fails with context.Canceled, joined to the node errors it
// caused. A node timeout is context.DeadlineExceeded, and a shutdown is
// errShuttingDown: neither is a client gone.
func clientGone(r *http.Request, err error) bool {
	if !errors.Is(err, context.Canceled) || errors.Is(err, errShuttingDown) || r.Context().Err() == nil {
		return false
	}
	setOutcome(r.Context(), outcomeClientGone)
	return true
}

// logRequest is the access log (hlog.AccessHandler's callback): one line for
// a request answered with status, with method, route pattern, resource,
// status, latency and outcome, and the req_id and API key name of the
// request's logger; it also records the request in the metrics. It never
// logs headers, tokens or bodies.
func (s *Server) logRequest(r *http.Request, status, _ int, elapsed time.Duration) {
	rq := reqInfoOf(r.Context())
	status = cmp.Or(status, http.StatusOK)
	if rq.outcome == outcomeClientGone {
		status = statusClientGone
	}
	route, resource := routeOf(r)
	outcome := cmp.Or(rq.outcome, strings.ToLower(http.StatusText(status)))
	level := zerolog.InfoLevel
	if status >= http.StatusInternalServerError {
		level = zerolog.ErrorLevel
	}
	hlog.FromRequest(r).WithLevel(level).
		Str("method", r.Method).
		Str("route", route).
		Str("resource", resource).
		Int("status", status).
		Float64("latency_ms", float64(elapsed.Microseconds())/1000).
		Str("outcome", outcome).
		Msg("request")
	s.metrics.observeRequest(route, r.Method, status, elapsed, outcome)
}

// routeOf returns the route pattern of a served request and its loggable
// resource. A request answered before routing (401 unauthorized, 413), or
// with 405, is matched against the routes here, so that it is logged and
// counted under its path's route too; "" when no route matches the path.
func routeOf(r *http.Request) (route, resource string) {
	rctx := chi.RouteContext(r.Context())
	if route = rctx.RoutePattern(); route != "" {
		return route, loggableResource(r, rctx.URLParam("resource"))
	}
	path := cmp.Or(r.URL.RawPath, r.URL.Path)
	for _, m := range []string{r.Method, http.MethodGet, http.MethodPost} {
		found := chi.NewRouteContext()
		if route = rctx.Routes.Find(found, m, path); route != "" {
			return route, loggableResource(r, found.URLParam("resource"))
		}
	}
	return "", ""
}

// loggableResource returns the percent-decoded resource of the path if it is a
// valid name, else "": the log shows no arbitrary client input.
func loggableResource(r *http.Request, raw string) string {
	if r.URL.RawPath != "" {
		var err error
		if raw, err = url.PathUnescape(raw); err != nil {
			return ""
		}
	}
	if !redlock.ValidName(raw) {
		return ""
	}
	return raw
}
