package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// maxBodyBytes is the largest request body accepted.
const maxBodyBytes = 16 << 10

// newRequestID returns a new request id: 26 random characters of base32,
// as crypto/rand.Text makes, but from the runtime's fast generator (an id
// must be unique, not secret, and crypto/rand costs the gateway a lock and
// a DRBG per request).
func newRequestID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	var b [26]byte
	var x uint64
	for i := range b {
		if i%12 == 0 { // 12 characters of 5 bits from each 64
			x = rand.Uint64()
		}
		b[i] = alphabet[x&31]
		x >>= 5
	}
	return string(b[:])
}

// requestIDRe matches an incoming X-Request-Id that is kept as it is.
var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// reqInfo is what the server knows of a request beyond *http.Request: its
// id, its caller and, for the access log, its outcome. front puts one in
// the request's context.
type reqInfo struct {
	start   time.Time
	id      string
	caller  *caller // nil when not authenticated
	outcome string
	r       *http.Request // the request, with this in its context
	// parked is set when the request is answered off the HTTP server (see
	// park.go), which logs it then.
	parked bool
	// body is the request body strictJSON decoded, a pointer to one of
	// jsonBodies' types; nil when the request has no body. See bodyOf.
	body any
	// pattern and pathResource are the route pattern of a routed request
	// and the resource in its path (as it is there, maybe escaped), noted
	// for the access log by serveFast or, after chi's routing, strictJSON.
	pattern, pathResource string
	// w is the request's ResponseWriter as front wraps it.
	w statusWriter
	// gone is set when the request ended because its client went away
	// (see clientGone).
	gone bool
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
// request's context when its client goes away, and a parked acquire's
// context is cancelled when its connection closes (see park.go); a lock
// operation cut short that way fails with context.Canceled, joined to the
// node errors it caused. A node timeout is context.DeadlineExceeded, and a
// shutdown is errShuttingDown: neither is a client gone.
func clientGone(r *http.Request, err error) bool {
	if !errors.Is(err, context.Canceled) || errors.Is(err, errShuttingDown) || r.Context().Err() == nil {
		return false
	}
	if rq := reqInfoOf(r.Context()); rq != nil {
		rq.gone = true
		rq.outcome = outcomeClientGone
	}
	return true
}

// statusWriter is an http.ResponseWriter that notes the status of the
// response, for the access log, and passes only the first final status on.
// http.ResponseController reaches the ResponseWriter under it (Hijack,
// Flush) through Unwrap.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader passes informational (1xx) codes on and notes the first
// final one; later calls are ignored.
func (w *statusWriter) WriteHeader(code int) {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if w.status == 0 {
		w.status = code
		w.ResponseWriter.WriteHeader(code)
	}
}

// Write writes the body, after a 200 status if none was written.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Status is the status written, 0 before any.
func (w *statusWriter) Status() int { return w.status }

// Unwrap returns the ResponseWriter under w, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type reqInfoKey struct{}

// reqInfoOf returns ctx's request, or nil outside front.
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

// logger returns the logger for lines about the request of ctx: s.log with
// its req_id and, when authenticated, the API key's name.
func (s *Server) logger(ctx context.Context) *zerolog.Logger {
	l := s.log
	if rq := reqInfoOf(ctx); rq != nil {
		l = rq.with(l.With()).Logger()
	}
	return &l
}

// with adds the request's id and API key name to a log context.
func (rq *reqInfo) with(c zerolog.Context) zerolog.Context {
	c = c.Str("req_id", rq.id)
	if rq.caller != nil {
		c = c.Str("key", rq.caller.name)
	}
	return c
}

// front is the first handler of every request. It gives the request an id,
// answers a panic with 500, checks the API key and the body size (see
// begin), and logs one line and records the metrics of the request when it
// is done.
//
// It is one function, not a chain of middlewares, because a waiting acquire
// blocks below it for up to --max-wait, and with thousands of waiters every
// frame on that stack is memory: the stack must stay within 8 KiB.
func (s *Server) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := &reqInfo{start: time.Now(), w: statusWriter{ResponseWriter: w}}
		r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, rq))
		rq.r = r
		defer s.finish(r, rq)
		if s.begin(&rq.w, r, rq) && !s.serveFast(&rq.w, r, rq) {
			next.ServeHTTP(&rq.w, r)
		}
	})
}

// begin gives the request its id, sent back in X-Request-Id: a well-formed
// incoming X-Request-Id or a new random one. Then it checks the API key (see
// authenticate) and caps the body at maxBodyBytes: a larger Content-Length
// is refused at once, and reading more than that fails with
// *http.MaxBytesError, which problemFor maps to 413. It reports whether the
// request goes on; if not, it answered it.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, rq *reqInfo) bool {
	// The header's name is in canonical form, as net/http keeps it.
	if v := r.Header["X-Request-Id"]; len(v) > 0 && requestIDRe.MatchString(v[0]) {
		rq.id = v[0]
	} else {
		rq.id = newRequestID()
	}
	w.Header()["X-Request-Id"] = []string{rq.id}
	if err := s.authenticate(r, rq); err != nil {
		s.writeProblem(w, r, err)
		return false
	}
	if r.ContentLength > maxBodyBytes {
		s.writeProblem(w, r, &http.MaxBytesError{Limit: maxBodyBytes})
		return false
	}
	if r.Body != nil && r.Body != http.NoBody { // NoBody: none to cap
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	}
	return true
}

// finish, deferred by front, turns a panic into a 500 internal problem,
// then logs the request (unless it was parked: see park.go).
func (s *Server) finish(r *http.Request, rq *reqInfo) {
	if v := recover(); v != nil {
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.recovered(&rq.w, r, v)
	}
	if !rq.parked {
		s.logRequest(r, rq, rq.w.Status())
	} else {
		// The parked acquire keeps rq until it is answered, and writes
		// its response itself: let go of net/http's (and its buffers,
		// some 3 KiB a waiter).
		rq.w.ResponseWriter = nil
	}
}

// recovered answers a recovered panic v with a 500 internal problem, and
// logs it with its stack.
func (s *Server) recovered(w http.ResponseWriter, r *http.Request, v any) {
	s.writeProblem(w, r, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
}

// logRequest logs one line for a request answered with status: method,
// route pattern, resource, status, latency and outcome (plus req_id, and the
// API key's name), and records the request in the metrics. It never logs
// headers, tokens or bodies.
func (s *Server) logRequest(r *http.Request, rq *reqInfo, status int) {
	elapsed := time.Since(rq.start)
	status = cmp.Or(status, http.StatusOK)
	if rq.gone {
		status = statusClientGone
	}
	route, resource := s.routeOf(r, rq)
	outcome := rq.outcome
	if outcome == "" {
		outcome = strings.ToLower(http.StatusText(status))
	}
	level := zerolog.InfoLevel
	if status >= http.StatusInternalServerError {
		level = zerolog.ErrorLevel
	}
	e := s.log.WithLevel(level).Str("req_id", rq.id)
	if rq.caller != nil {
		e = e.Str("key", rq.caller.name)
	}
	e.Str("method", r.Method).
		Str("route", route).
		Str("resource", resource).
		Int("status", status).
		Float64("latency_ms", float64(elapsed.Microseconds())/1000).
		Str("outcome", outcome).
		Msg("request")
	s.metrics.observeRequest(route, r.Method, status, elapsed, outcome)
}

// routeOf returns the route pattern of a served request and its loggable
// resource. A request answered before routing (401 unauthorized, 413), by
// the generated wrappers (a bad parameter) or with 405 is matched against
// the routes here, so that it is logged and counted under its path's route
// too; "" when no route matches the path.
func (s *Server) routeOf(r *http.Request, rq *reqInfo) (route, resource string) {
	if rq.pattern != "" { // routed by serveFast or chi (see strictJSON)
		return rq.pattern, loggableResource(r, rq.pathResource)
	}
	path := cmp.Or(r.URL.RawPath, r.URL.Path)
	for _, m := range []string{r.Method, http.MethodGet, http.MethodPost} {
		found := chi.NewRouteContext()
		if route = s.routes.Find(found, m, path); route != "" {
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

// methodNotAllowed answers 405 with the Allow header listing the methods the
// path supports (HEAD with every GET: see routeHead).
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	path := cmp.Or(r.URL.RawPath, r.URL.Path)
	var allow []string
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.Routes != nil {
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPatch,
			http.MethodDelete, http.MethodPut, http.MethodOptions} {
			if rctx.Routes.Match(chi.NewRouteContext(), m, path) {
				allow = append(allow, m)
			}
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	s.writeProblem(w, r, errNoMethod)
}

// jsonBodies are the request body types of the operations that have one,
// by method and route pattern, with the struct field index of each of their
// JSON members.
var jsonBodies = map[string]jsonBody{
	"POST /locks/{resource}":  {func() any { return new(api.AcquireRequest) }, jsonFields[api.AcquireRequest]()},
	"PATCH /locks/{resource}": {func() any { return new(api.ExtendRequest) }, jsonFields[api.ExtendRequest]()},
}

// jsonBody is a request body type: new makes one, and fields gives the
// struct field index of each of its JSON members.
type jsonBody struct {
	new    func() any
	fields map[string]int
}

// strictJSON checks request bodies more strictly than the generated decoder
// does, before it runs: the Content-Type, if any, must be application/json,
// and a non-empty body must be one JSON object, in UTF-8, with only known,
// distinct members of the right types and nothing after it. It runs after
// routing, so it knows the operation.
//
// The body is decoded here once: the handler takes it from the request's
// reqInfo (see bodyOf), and the generated decoder is handed an empty body,
// which it takes for no body.
func (s *Server) strictJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := reqInfoOf(r.Context()) // strictJSON runs inside front
		rctx := chi.RouteContext(r.Context())
		rq.pattern, rq.pathResource = rctx.RoutePattern(), rctx.URLParam("resource")
		body, ok := jsonBodies[r.Method+" "+rq.pattern]
		if !ok || r.Body == nil || s.readJSONBody(w, r, rq, body) {
			next.ServeHTTP(w, r)
		}
	})
}

// readJSONBody checks and decodes the body of r, of type body, as strictJSON
// describes, and puts it in rq. It reports whether the request goes on; if
// not, it answered it with a problem.
func (s *Server) readJSONBody(w http.ResponseWriter, r *http.Request, rq *reqInfo, body jsonBody) bool {
	// The media type as clients send it is taken as it is; anything else is
	// parsed.
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			s.writeProblem(w, r, badRequest("Content-Type must be application/json (curl: use --json, or -H 'Content-Type: application/json')"))
			return false
		}
	}
	if r.Body == http.NoBody {
		return true // no body, as the generated decoder will find too
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		s.writeProblem(w, r, &requestError{detail: "cannot read the request body", err: err})
		return false
	}
	dst := body.new()
	if err := decodeStrict(data, dst, body.fields); err != nil {
		s.writeProblem(w, r, err)
		return false
	}
	if !isBlank(data) {
		rq.body = dst
	}
	r.Body = http.NoBody
	return true
}

// bodyOf returns the request body b the generated decoder decoded, or, when
// it has none, the body strictJSON decoded for the request of ctx if that is
// a *T; nil when the request has no body.
func bodyOf[T any](ctx context.Context, b *T) *T {
	if b != nil {
		return b
	}
	if rq := reqInfoOf(ctx); rq != nil {
		if b, ok := rq.body.(*T); ok {
			return b
		}
	}
	return nil
}

// isBlank reports whether data is empty or only white space: no body.
func isBlank(data []byte) bool {
	return len(bytes.TrimSpace(data)) == 0
}

// decodeStrict decodes data into dst, a pointer to a struct whose JSON
// members are fields, by name, with their field index. Empty or blank data
// is no body and is accepted. It returns a *requestError for anything but
// one JSON object with distinct members from fields, of the right types, and
// nothing after it.
func decodeStrict(data []byte, dst any, fields map[string]int) error {
	if isBlank(data) {
		return nil
	}
	if !utf8.Valid(data) {
		return badRequest("the body is not valid UTF-8")
	}
	if decodeFlat(data, dst, fields) {
		return nil
	}
	return decodeTokens(data, dst, fields)
}

// The field types decodeFlat decodes.
var (
	int64PtrType  = reflect.TypeFor[*int64]()
	stringPtrType = reflect.TypeFor[*string]()
)

// decodeFlat decodes data into dst, as decodeTokens would, if data is a flat
// body, and reports whether it did; if not, it leaves dst as it was. A flat
// body is one JSON object, with any JSON white space, of distinct member
// names from fields written without escapes, whose values are integers
// (without a fraction, an exponent, a leading zero or a minus zero, and of
// at most 18 digits) for *int64 fields and strings without escapes or
// control characters for *string fields. That is what clients send, and it
// is decoded here in one pass without encoding/json. Anything else (null,
// escapes, and every body that decodeStrict rejects) is left to
// decodeTokens, which finds the problem and describes it. data must be
// valid UTF-8.
func decodeFlat(data []byte, dst any, fields map[string]int) bool {
	type member struct {
		field int
		n     int64
		s     string
	}
	var (
		members [8]member
		count   int
		seen    uint64
	)
	obj := reflect.ValueOf(dst).Elem()
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	for more := i < len(data) && data[i] != '}'; more; {
		// The member name.
		if i == len(data) || data[i] != '"' {
			return false
		}
		end := bytes.IndexByte(data[i+1:], '"')
		if end < 0 {
			return false
		}
		name := data[i+1 : i+1+end]
		f, known := fields[string(name)]
		if !known || f >= 64 || seen&(1<<f) != 0 || count == len(members) || bytes.IndexByte(name, '\\') >= 0 {
			return false
		}
		seen |= 1 << f
		m := &members[count]
		m.field = f
		count++
		// The colon, then the value.
		if i = skipSpace(data, i+2+end); i == len(data) || data[i] != ':' {
			return false
		}
		if i = skipSpace(data, i+1); i == len(data) {
			return false
		}
		switch obj.Field(f).Type() {
		case int64PtrType:
			var ok bool
			if m.n, i, ok = flatInt(data, i); !ok {
				return false
			}
		case stringPtrType:
			if data[i] != '"' {
				return false
			}
			start := i + 1
			for i = start; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' || data[i] < 0x20 {
					return false
				}
			}
			if i == len(data) {
				return false
			}
			m.s = string(data[start:i])
			i++
		default:
			return false
		}
		// A comma and the next member, or the end of the object.
		if i = skipSpace(data, i); i == len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			more = false
		default:
			return false
		}
	}
	if i == len(data) || skipSpace(data, i+1) != len(data) {
		return false // no closing brace, or data after it
	}
	for _, m := range members[:count] {
		field := obj.Field(m.field)
		p := reflect.New(field.Type().Elem())
		if field.Type() == int64PtrType {
			p.Elem().SetInt(m.n)
		} else {
			p.Elem().SetString(m.s)
		}
		field.Set(p)
	}
	return true
}

// flatInt parses the integer at data[i:] for decodeFlat: an optional minus
// and 1 to 18 digits, without a leading zero (but for 0 itself) or a minus
// zero, and followed by the end of the value. It returns the integer, the
// index after it, and whether it was one.
func flatInt(data []byte, i int) (int64, int, bool) {
	neg := data[i] == '-'
	if neg {
		i++
	}
	start := i
	var n int64
	for ; i < len(data) && data[i] >= '0' && data[i] <= '9'; i++ {
		n = n*10 + int64(data[i]-'0')
	}
	digits := i - start
	switch {
	case digits == 0 || digits > 18,
		data[start] == '0' && (digits > 1 || neg),
		i < len(data) && !isSpace(data[i]) && data[i] != ',' && data[i] != '}':
		return 0, i, false
	}
	if neg {
		n = -n
	}
	return n, i, true
}

// decodeTokens is decodeStrict for any data that is not blank and is valid
// UTF-8, in two passes.
func decodeTokens(data []byte, dst any, fields map[string]int) error {
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
		_, known := fields[name]
		switch {
		case !known:
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

// skipSpace returns the index of the first byte of data from i on that is
// not JSON white space, or len(data).
func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// isSpace reports whether c is JSON white space.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
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

// jsonFields returns the JSON member names of struct type T, with the index
// of their field.
func jsonFields[T any]() map[string]int {
	t := reflect.TypeFor[T]()
	fields := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			fields[name] = i
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
