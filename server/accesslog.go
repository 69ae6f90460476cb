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

	"github.com/redlockd/redlockd/redlock"
)

// requestIDRe matches an incoming X-Request-Id that is kept as it is.
var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// reqInfo is what the server learns of a request while serving it, for its
// access log line and metrics. begin puts one in the request's context.
type reqInfo struct {
	id         string    // the request id, sent back in X-Request-Id
	remoteAddr string    // the client's address, as net/http gives it
	userAgent  string    // the User-Agent header; "" when there is none
	caller     *keyEntry // the API key; nil when not authenticated
	outcome    string
	fence      int64 // the fencing token of the lock answered with; 0: none
}

type reqInfoKey struct{}

// reqInfoOf returns ctx's request, or nil outside Handler.
func reqInfoOf(ctx context.Context) *reqInfo {
	rq, _ := ctx.Value(reqInfoKey{}).(*reqInfo)
	return rq
}

// requestID is ctx's request id, which the generated responses set as
// X-Request-Id again (openapi.yaml declares it on every response).
func requestID(ctx context.Context) string {
	if rq := reqInfoOf(ctx); rq != nil {
		return rq.id
	}
	return ""
}

func setOutcome(ctx context.Context, outcome string) {
	if rq := reqInfoOf(ctx); rq != nil {
		rq.outcome = outcome
	}
}

// setLockOutcome is setOutcome for an answer that carries a lock's fencing
// token, which the access line shows (unlike the lock token, it is no secret).
func setLockOutcome(ctx context.Context, outcome string, fence int64) {
	setOutcome(ctx, outcome)
	if rq := reqInfoOf(ctx); rq != nil {
		rq.fence = fence
	}
}

// outcomeUnready is the outcome of a /readyz 503: logged at info level, not
// as an error, since probes repeat it for as long as the gateway is unready;
// GetReadyz warns once when the answer turns unready. The 503s of a graceful
// shutdown (outcomeShuttingDown, the problem's type) are logged at info
// level too: every waiter gets one in a rolling restart, and the shutdown is
// logged where it starts.
const (
	outcomeUnready      = "unready"
	outcomeShuttingDown = "shutting-down"
)

// begin gives the request its id (a well-formed incoming X-Request-Id or a
// new random one), sent back in X-Request-Id, and puts the request's reqInfo
// in its context, with what every line the request logs carries (see
// logEvent).
func (s *Server) begin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "" || !requestIDRe.MatchString(id) {
			id = rand.Text()
		}
		w.Header().Set("X-Request-Id", id)
		rq := &reqInfo{id: id, remoteAddr: r.RemoteAddr, userAgent: r.Header.Get("User-Agent")}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, rq)))
	})
}

// logEvent starts a line of the server's log at level with the fields of
// request rq (reqInfoOf; nil: none): req_id, remote_addr and user_agent
// (the fields of hlog's RequestIDHandler, RemoteAddrHandler and
// UserAgentHandler) and key, the name of the request's API key. A request
// has no logger of its own (hlog.NewHandler copies the logger and its
// context for every request): the few lines it logs add its fields
// themselves.
func (s *Server) logEvent(rq *reqInfo, level zerolog.Level) *zerolog.Event {
	e := s.cfg.Log.WithLevel(level)
	if e == nil || rq == nil {
		return e
	}
	e.Str("req_id", rq.id)
	if rq.remoteAddr != "" {
		e.Str("remote_addr", rq.remoteAddr)
	}
	if rq.userAgent != "" {
		e.Str("user_agent", rq.userAgent)
	}
	if rq.caller != nil {
		e.Str("key", rq.caller.name)
	}
	return e
}

// A request whose client went away before its answer is logged and counted
// with outcome outcomeClientGone and status statusClientGone (nginx's 499
// "client closed request") at info level: it is no failure of the gateway
// or of Redis, and the client sees no status at all.
const (
	outcomeClientGone = "client_gone"
	statusClientGone  = 499
)

// clientGone reports whether err ended request r because its client went
// away (net/http cancels its context: the lock operation fails with
// context.Canceled), and if so notes it for the access log. A node timeout
// (context.DeadlineExceeded) or a shutdown (errShuttingDown) is none.
func clientGone(r *http.Request, err error) bool {
	if !errors.Is(err, context.Canceled) || errors.Is(err, errShuttingDown) || r.Context().Err() == nil {
		return false
	}
	setOutcome(r.Context(), outcomeClientGone)
	return true
}

// logRequest is the access log (hlog.AccessHandler's callback): one line per
// request, with the fields of logEvent and the fencing token of a lock
// answer; it also records the request in the metrics and its span. It never
// logs other headers, lock tokens or bodies.
func (s *Server) logRequest(r *http.Request, status, _ int, elapsed time.Duration) {
	rq := reqInfoOf(r.Context())
	status = cmp.Or(status, http.StatusOK)
	if rq.outcome == outcomeClientGone {
		status = statusClientGone
	}
	route, resource := routeOf(r)
	outcome := cmp.Or(rq.outcome, strings.ToLower(http.StatusText(status)))
	level := zerolog.InfoLevel
	if status >= http.StatusInternalServerError && outcome != outcomeUnready && outcome != outcomeShuttingDown {
		level = zerolog.ErrorLevel
	}
	e := s.logEvent(rq, level).
		Str("method", r.Method).
		Str("route", route).
		Str("resource", resource).
		Int("status", status).
		Float64("latency_ms", float64(elapsed.Microseconds())/1000).
		Str("outcome", outcome)
	if rq.fence != 0 {
		e.Int64("fencing_token", rq.fence)
	}
	e.Msg("request")
	traceRequest(r, route, resource, outcome, rq.fence)
	s.cfg.Metrics.observeRequest(route, r.Method, status, elapsed, outcome)
}

// routeOf returns the route pattern of a served request and its loggable
// resource. A request answered before routing (401 unauthorized, 413), or
// with 405, is matched against the routes here, so that it is logged and
// counted under its path's route too; "" when no route matches the path.
func routeOf(r *http.Request) (route, resource string) {
	rctx := chi.RouteContext(r.Context())
	if route = rctx.RoutePattern(); route != "" {
		return route, loggableResource(r, cmp.Or(rctx.URLParam("resource"), rctx.URLParam("name")))
	}
	path := cmp.Or(r.URL.RawPath, r.URL.Path)
	for _, m := range []string{r.Method, http.MethodGet, http.MethodPost} {
		found := chi.NewRouteContext()
		if route = rctx.Routes.Find(found, m, path); route != "" {
			return route, loggableResource(r, cmp.Or(found.URLParam("resource"), found.URLParam("name")))
		}
	}
	return "", ""
}

// loggableResource returns the percent-decoded resource of the path if it is a
// valid name, else "": the log shows no arbitrary client input.
func loggableResource(r *http.Request, raw string) string {
	var err error
	if r.URL.RawPath != "" {
		raw, err = url.PathUnescape(raw)
	}
	if err != nil || !redlock.ValidName(raw) {
		return ""
	}
	return raw
}
