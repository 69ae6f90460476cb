package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// maxBodyBytes is the largest request body accepted.
const maxBodyBytes = 16 << 10

// requestIDRe matches an incoming X-Request-Id that is kept as it is.
var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// withLogger gives every request its own copy of log, which the handlers
// find with zerolog.Ctx. (zerolog's hlog.NewHandler does the same, but hlog
// needs github.com/rs/xid, which is not a dependency.)
func withLogger(log zerolog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l := log.With().Logger()
			next.ServeHTTP(w, r.WithContext(l.WithContext(r.Context())))
		})
	}
}

// requestID gives every request an id: a well-formed incoming X-Request-Id,
// or a new random one. It is sent back in X-Request-Id on every response and
// added to the request's logger as req_id.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !requestIDRe.MatchString(id) {
			id = rand.Text()
		}
		w.Header().Set("X-Request-Id", id)
		zerolog.Ctx(r.Context()).UpdateContext(func(c zerolog.Context) zerolog.Context {
			return c.Str("req_id", id)
		})
		next.ServeHTTP(w, r)
	})
}

// reqInfo collects what the access log tells about a request beyond what
// the router knows.
type reqInfo struct {
	outcome string
}

type reqInfoKey struct{}

// setOutcome records the outcome of the request for the access log.
func setOutcome(ctx context.Context, outcome string) {
	if ri, ok := ctx.Value(reqInfoKey{}).(*reqInfo); ok {
		ri.outcome = outcome
	}
}

// accessLog logs one line per request: method, route pattern, resource,
// status, latency and outcome (plus req_id, and the API key's name, from the
// logger), and records the request in the metrics. It never logs headers,
// tokens or bodies.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		ri := &reqInfo{}
		r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, ri))

		next.ServeHTTP(ww, r)

		elapsed := time.Since(start)
		status := cmp.Or(ww.Status(), http.StatusOK)
		route, resource := routeOf(r)
		outcome := cmp.Or(ri.outcome, strings.ToLower(http.StatusText(status)))
		level := zerolog.InfoLevel
		if status >= http.StatusInternalServerError {
			level = zerolog.ErrorLevel
		}
		zerolog.Ctx(r.Context()).WithLevel(level).
			Str("method", r.Method).
			Str("route", route).
			Str("resource", resource).
			Int("status", status).
			Float64("latency_ms", float64(elapsed.Microseconds())/1000).
			Str("outcome", outcome).
			Msg("request")
		s.metrics.observeRequest(route, r.Method, status, elapsed, outcome)
	})
}

// routeOf returns the route pattern of a served request and its loggable
// resource. A request answered before routing (401 unauthorized, 413) or
// with 405 is matched against the routes here, so that it is logged and
// counted under its path's route too; "" when no route matches the path.
func routeOf(r *http.Request) (route, resource string) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return "", ""
	}
	if route = rctx.RoutePattern(); route != "" {
		return route, loggableResource(r, rctx.URLParam("resource"))
	}
	if rctx.Routes == nil {
		return "", ""
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

// recoverer turns a panic into a 500 internal problem and logs it.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.writeProblem(w, r, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
		}()
		next.ServeHTTP(w, r)
	})
}

// limitBody caps request bodies at maxBodyBytes: a larger Content-Length is
// refused at once, and reading more than that fails with
// *http.MaxBytesError, which problemFor maps to 413.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBodyBytes {
			s.writeProblem(w, r, &http.MaxBytesError{Limit: maxBodyBytes})
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// methodNotAllowed answers 405 with the Allow header listing the methods the
// path supports.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	path := cmp.Or(r.URL.RawPath, r.URL.Path)
	var allow []string
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.Routes != nil {
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete,
			http.MethodPut, http.MethodHead, http.MethodOptions} {
			if rctx.Routes.Match(chi.NewRouteContext(), m, path) {
				allow = append(allow, m)
			}
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	s.writeProblem(w, r, errNoMethod)
}

// jsonBodies are the request body types of the operations that have one,
// by method and route pattern, with the names of their members.
var jsonBodies = map[string]struct {
	new    func() any
	fields map[string]bool
}{
	"POST /locks/{resource}":  {func() any { return new(api.AcquireRequest) }, jsonFields[api.AcquireRequest]()},
	"PATCH /locks/{resource}": {func() any { return new(api.ExtendRequest) }, jsonFields[api.ExtendRequest]()},
}

// strictJSON checks request bodies more strictly than the generated decoder
// does, before it runs: the Content-Type, if any, must be application/json,
// and a non-empty body must be one JSON object, in UTF-8, with only known,
// distinct members of the right types and nothing after it. It runs after
// routing, so it knows the operation.
func (s *Server) strictJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := jsonBodies[r.Method+" "+chi.RouteContext(r.Context()).RoutePattern()]
		if !ok || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				s.writeProblem(w, r, badRequest("Content-Type must be application/json (curl: use --json, or -H 'Content-Type: application/json')"))
				return
			}
		}
		data, err := io.ReadAll(r.Body)
		if err != nil {
			s.writeProblem(w, r, &requestError{detail: "cannot read the request body", err: err})
			return
		}
		if err := decodeStrict(data, body.new(), body.fields); err != nil {
			s.writeProblem(w, r, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		next.ServeHTTP(w, r)
	})
}

// decodeStrict decodes data into dst, a pointer to a struct whose JSON
// member names are fields. Empty or blank data is no body and is accepted.
// It returns a *requestError for anything but one JSON object with distinct
// members from fields, of the right types, and nothing after it.
func decodeStrict(data []byte, dst any, fields map[string]bool) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if !utf8.Valid(data) {
		return badRequest("the body is not valid UTF-8")
	}

	// First pass: the shape, member names and duplicates, which
	// encoding/json does not check (it matches names case-insensitively
	// and lets the last duplicate win).
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil {
		return jsonError(err)
	} else if tok != json.Delim('{') {
		return badRequest("the body must be a JSON object")
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return jsonError(err)
		}
		name, _ := tok.(string)
		switch {
		case !fields[name]:
			return badRequest("unknown field %q", truncate(name, 64))
		case seen[name]:
			return badRequest("duplicate field %q", name)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return jsonError(err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("unexpected data after the JSON object")
	}

	// Second pass: the types.
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	return nil
}

// jsonError describes a JSON decoding error for the client.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		want := "a string"
		switch typeErr.Type.Kind() {
		case reflect.Int, reflect.Int64:
			want = "an integer"
		}
		return &requestError{detail: fmt.Sprintf("%s must be %s, not JSON %s", typeErr.Field, want, typeErr.Value), err: err}
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return &requestError{detail: "malformed JSON: " + syntaxErr.Error(), err: err}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &requestError{detail: "malformed JSON: unexpected end of the body", err: err}
	}
	return &requestError{detail: "malformed JSON", err: err}
}

// jsonFields returns the JSON member names of struct type T.
func jsonFields[T any]() map[string]bool {
	t := reflect.TypeFor[T]()
	fields := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			fields[name] = true
		}
	}
	return fields
}

// truncate returns s cut to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
