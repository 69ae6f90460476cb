package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// problemTypePrefix + kind is a problem's type.
const problemTypePrefix = "urn:redlockd:problem:"

// Errors of the server itself, mapped by problemFor.
var (
	errShuttingDown = errors.New("server: shutting down") // BeginShutdown was called
	errNoRoute      = errors.New("server: no route")
	errNoMethod     = errors.New("server: method not allowed")
	errNoMetrics    = errors.New("server: metrics not enabled")
	// errTooManyWaiters means Config.MaxWaiters acquires are already waiting,
	// errNamespaceWaiters that Config.MaxWaitersPerNamespace of the caller's
	// namespace are.
	errTooManyWaiters   = errors.New("server: too many waiters")
	errNamespaceWaiters = fmt.Errorf("%w in this namespace", errTooManyWaiters)
)

// requestError is a malformed request. Its detail is shown to the client, so
// it must never hold a token; Err, if any, is only unwrapped.
type requestError struct {
	detail string
	err    error
}

func badRequest(format string, args ...any) error {
	return &requestError{detail: fmt.Sprintf(format, args...)}
}

func (e *requestError) Error() string { return "invalid request: " + e.detail }
func (e *requestError) Unwrap() error { return e.err }

// problem is what the client is told about an error.
type problem struct {
	status              int
	kind, title, detail string
	lockState           api.ProblemLockState
	limit               int // with limit-mismatch
	// retryAfter, when positive, is sent as Retry-After and retry_after_ms;
	// wwwAuthenticate, when set, as WWW-Authenticate.
	retryAfter      time.Duration
	wwwAuthenticate string
}

// problemFor is the one table from errors to HTTP statuses and problem
// types. Anything it does not know is a 500 whose detail hides the error.
func (s *Server) problemFor(err error) problem {
	var (
		held     *redlock.HeldError
		req      *requestError
		tooBig   *http.MaxBytesError
		mismatch *limitMismatch
		limitErr *redlock.LimitError
	)
	switch {
	case errors.Is(err, errShuttingDown):
		return problem{status: http.StatusServiceUnavailable, kind: outcomeShuttingDown, title: "Shutting down",
			detail: "the server is shutting down; try again", retryAfter: jitter(time.Second)}
	case errors.Is(err, errNoKey):
		return problem{status: http.StatusUnauthorized, kind: "unauthorized", title: "Unauthorized",
			detail:          "an API key is required: send Authorization: Bearer <key>",
			wwwAuthenticate: `Bearer realm="redlockd"`}
	case errors.Is(err, errBadKey):
		return problem{status: http.StatusUnauthorized, kind: "unauthorized", title: "Unauthorized",
			detail:          "the API key is not valid: send one Authorization: Bearer <key> header with a key of this server",
			wwwAuthenticate: `Bearer realm="redlockd", error="invalid_token"`}
	case errors.Is(err, errNamespaceWaiters):
		return problem{status: http.StatusServiceUnavailable, kind: "too-many-waiters", title: "Too many waiters",
			detail: fmt.Sprintf("%d acquires of this namespace are already waiting on this gateway, the per-namespace limit "+
				"(its share of the gateway's %d waiting slots); try again later, or without wait_ms", s.cfg.MaxWaitersPerNamespace, s.cfg.MaxWaiters),
			retryAfter: jitter(time.Second)}
	case errors.Is(err, errTooManyWaiters):
		return problem{status: http.StatusServiceUnavailable, kind: "too-many-waiters", title: "Too many waiters",
			detail:     fmt.Sprintf("%d acquires are already waiting on this gateway, the gateway's limit; try again later, or without wait_ms", s.cfg.MaxWaiters),
			retryAfter: jitter(time.Second)}
	case errors.As(err, &tooBig):
		return problem{status: http.StatusRequestEntityTooLarge, kind: "payload-too-large", title: "Payload too large",
			detail: fmt.Sprintf("the request body is larger than %d bytes", maxBodyBytes)}
	case errors.As(err, &req):
		return problem{status: http.StatusBadRequest, kind: "invalid-request", title: "Invalid request", detail: req.detail}
	case errors.Is(err, redlock.ErrInvalid):
		return problem{status: http.StatusBadRequest, kind: "invalid-request", title: "Invalid request",
			detail: invalidDetail(err)}
	case errors.As(err, &mismatch):
		held := "another limit"
		if errors.As(err, &limitErr) {
			held = fmt.Sprintf("limit %d", limitErr.Limit)
		} else {
			limitErr = &redlock.LimitError{}
		}
		return problem{status: http.StatusConflict, kind: "limit-mismatch", title: "Limit mismatch",
			detail: fmt.Sprintf("the semaphore's permits are held with %s, not %d: every holder must ask for the same limit", held, mismatch.asked),
			limit:  limitErr.Limit}
	case errors.Is(err, redlock.ErrLockHeld):
		// Come back when the lock expires (1s if unknown, at most max TTL),
		// with jitter, so that many waiting clients do not come back at once.
		remaining := time.Second
		if errors.As(err, &held) && held.Remaining > 0 {
			remaining = held.Remaining
		}
		detail := "the lock is held by another owner"
		if errors.Is(err, errPermitsHeld) {
			detail = "every permit of the semaphore is held"
		}
		return problem{status: http.StatusConflict, kind: "lock-held", title: "Lock held",
			detail: detail, retryAfter: jitter(min(remaining, s.cfg.MaxTTL))}
	case errors.Is(err, redlock.ErrLockExpired):
		return problem{status: http.StatusConflict, kind: "not-owner", title: "Not the lock owner",
			detail:    "the lock expired or was released before: the critical section may not have been exclusive",
			lockState: api.ProblemLockStateExpired}
	case errors.Is(err, redlock.ErrHeldByOther):
		return problem{status: http.StatusConflict, kind: "not-owner", title: "Not the lock owner",
			detail:    "the lock is held by another owner: the critical section may not have been exclusive",
			lockState: api.ProblemLockStateHeldByOther}
	case errors.Is(err, redlock.ErrNotOwner):
		return problem{status: http.StatusConflict, kind: "not-owner", title: "Not the lock owner",
			detail: "the token does not hold the lock"}
	case errors.Is(err, redlock.ErrQuorumUnavailable),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Come back once a quorum votes again (a node's quarantine ends
		// within max TTL), with jitter.
		u := s.cfg.Locker.Explain(err)
		return problem{status: http.StatusServiceUnavailable, kind: "quorum-unavailable", title: "Quorum unavailable",
			detail: s.unavailableDetail(u), retryAfter: min(u.VotesAgainIn, s.cfg.MaxTTL) + jitter(time.Second)}
	case errors.Is(err, errNoRoute):
		return problem{status: http.StatusNotFound, kind: "not-found", title: "Not found", detail: "no such path"}
	case errors.Is(err, errNoMetrics): // this server has no /metrics: no such route
		return problem{status: http.StatusNotFound, kind: "not-found", title: "Not found", detail: "no such path: metrics are not enabled"}
	case errors.Is(err, errNoMethod):
		return problem{status: http.StatusMethodNotAllowed, kind: "method-not-allowed", title: "Method not allowed",
			detail: "the path does not support this method; see the Allow header"}
	default:
		return problem{status: http.StatusInternalServerError, kind: "internal", title: "Internal error",
			detail: "internal error"}
	}
}

// writeProblem writes the problem+json response for err and logs err when it
// is not the client's doing. It is the only code that writes error bodies.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := s.problemFor(err)
	setOutcome(r.Context(), p.kind)
	rq := reqInfoOf(r.Context())
	switch {
	case clientGone(r, err):
		// Not a failure: the access log says client_gone (accesslog.go).
	case p.kind == "internal":
		s.logEvent(rq, zerolog.ErrorLevel).Err(err).Msg("internal error")
	case p.kind == "quorum-unavailable":
		s.logEvent(rq, zerolog.WarnLevel).Err(err).Msg("quorum unavailable")
	}
	if sw, ok := w.(interface{ Status() int }); ok && sw.Status() != 0 {
		s.logEvent(rq, zerolog.WarnLevel).Err(err).Msg("error after the response was started")
		return
	}

	body := api.Problem{Type: api.ProblemType(problemTypePrefix + p.kind), Title: p.title, Status: p.status, Detail: p.detail}
	if p.lockState != "" {
		body.LockState = &p.lockState
	}
	if p.limit != 0 {
		body.Limit = &p.limit
	}
	if p.retryAfter > 0 {
		ms := p.retryAfter.Milliseconds()
		body.RetryAfterMs = &ms
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, (ms+999)/1000), 10))
	}
	if p.wwwAuthenticate != "" {
		w.Header().Set("WWW-Authenticate", p.wwwAuthenticate)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.status)
	_ = json.NewEncoder(w).Encode(body) // the client is gone if this fails
}

// unavailableDetail says why a quorum was not reached, whether the request
// may have taken effect, and when a quorum votes again (Locker.Explain),
// without tokens, credentials or addresses.
func (s *Server) unavailableDetail(u redlock.Unavailable) string {
	outcome := "the outcome is unknown, try again"
	if u.NotGranted {
		outcome = "not granted, try again"
	}
	if u.VotesAgainIn > 0 {
		outcome += fmt.Sprintf(" in %v, when a quorum of nodes votes again", min(u.VotesAgainIn, s.cfg.MaxTTL).Round(time.Second))
	}
	if len(u.Refused) == 0 && u.Silent == 0 && u.Unreachable == 0 && u.Quarantined == 0 && u.Aliased == 0 {
		return "too few nodes answered in time; " + outcome
	}
	return u.Describe(s.cfg.Locker.Nodes(), s.cfg.Locker.Quorum()) + "; " + outcome
}

// jitter returns d plus a random part of up to 10% of d plus 100ms.
func jitter(d time.Duration) time.Duration {
	return d + rand.N(d/10+100*time.Millisecond)
}

// invalidDetail is the message of a redlock.ErrInvalid error without its
// package prefix; a rule ("ttl must be …") names its argument by its JSON
// member (members), as schemaDetail does. redlock never puts tokens in these
// messages.
func invalidDetail(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	msg = strings.TrimPrefix(strings.TrimPrefix(msg, redlock.ErrInvalid.Error()), ": ")
	if arg, rule, ok := strings.Cut(msg, " "); ok && members[arg] != "" && strings.HasPrefix(rule, "must ") {
		msg = members[arg] + ": " + rule
	}
	return cmp.Or(msg, "invalid argument")
}

// members are the JSON members of the coordinator's arguments that it
// checks against its configuration.
var members = map[string]string{"ttl": "ttl_ms", "wait": "wait_ms"}

// paramError is the generated router's hook for parameters it cannot bind
// (before validateRequest checks them against openapi.yaml).
func (s *Server) paramError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		missing *api.RequiredHeaderError
		absent  *api.RequiredParamError
		many    *api.TooManyValuesForParamError
		format  *api.InvalidParamFormatError
	)
	detail := "invalid parameter"
	switch {
	case errors.As(err, &missing):
		detail = fmt.Sprintf("the %s header is required", missing.ParamName)
	case errors.As(err, &absent):
		detail = fmt.Sprintf("the %s parameter is required (the Location of the acquire names the resources)", absent.ParamName)
	case errors.As(err, &many):
		detail = fmt.Sprintf("the %s header must be given once", many.ParamName)
	case errors.As(err, &format):
		detail = fmt.Sprintf("%s: must be given once, as openapi.yaml types it", format.ParamName)
	}
	s.writeProblem(w, r, &requestError{detail: detail, err: err})
}

// bodyError is the strict handler's hook for request bodies it cannot
// decode. validateRequest has decoded the body before, so this is rare.
func (s *Server) bodyError(w http.ResponseWriter, r *http.Request, err error) {
	detail := "malformed JSON body"
	if errors.Is(err, io.EOF) {
		detail = "a JSON body is required"
	}
	s.writeProblem(w, r, &requestError{detail: detail, err: err})
}

// recoverer answers a panic in a handler with a 500 internal problem, logged
// with its stack; http.ErrAbortHandler goes on up to net/http.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.writeProblem(w, r, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
