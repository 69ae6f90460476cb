package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
)

// maxBodyBytes is the largest request body accepted.
const maxBodyBytes = 16 << 10

// limitBody caps the body at maxBodyBytes: a larger Content-Length is
// refused at once, and reading more than that fails with
// *http.MaxBytesError, which problemFor maps to 413.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBodyBytes {
			s.writeProblem(w, r, &http.MaxBytesError{Limit: maxBodyBytes})
			return
		}
		if r.Body != nil && r.Body != http.NoBody { // NoBody: none to cap
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// The JSON types of body members, as errors name them.
const (
	jsonInteger = "an integer"
	jsonString  = "a string"
	jsonNames   = "an array of strings"
)

// bodyFields are the JSON members of api.AcquireRequest,
// api.AcquirePermitRequest, api.MultiAcquireRequest and api.ExtendRequest, by operation, with the
// type each must have.
var bodyFields = map[string]map[string]string{
	"POST /locks/{resource}":   {"ttl_ms": jsonInteger, "wait_ms": jsonInteger, "token": jsonString, "owner": jsonString, "mode": jsonString},
	"PATCH /locks/{resource}":  {"ttl_ms": jsonInteger},
	"POST /semaphores/{name}":  {"limit": jsonInteger, "ttl_ms": jsonInteger, "wait_ms": jsonInteger, "token": jsonString, "owner": jsonString},
	"PATCH /semaphores/{name}": {"ttl_ms": jsonInteger},
	"POST /locks":              {"resources": jsonNames, "ttl_ms": jsonInteger, "wait_ms": jsonInteger, "token": jsonString, "owner": jsonString},
	"PATCH /locks":             {"ttl_ms": jsonInteger},
}

// strictJSON checks a request body after routing, before the generated
// decoder: Content-Type, if any, application/json; a non-empty body one JSON
// object in UTF-8 with only known, distinct members of the right types and
// nothing after it. The generated decoder binds the value decoded here.
func (s *Server) strictJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fields, ok := bodyFields[r.Method+" "+chi.RouteContext(r.Context()).RoutePattern()]; ok {
			if err := readJSONBody(r, fields); err != nil {
				s.writeProblem(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readJSONBody checks and decodes the body of r as strictJSON describes, and
// replaces it with a decodedBody, or with http.NoBody when it is empty.
func readJSONBody(r *http.Request, fields map[string]string) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return badRequest("Content-Type must be application/json (curl: use --json, or -H 'Content-Type: application/json')")
		}
	}
	if r.Body == http.NoBody {
		return nil // no body, as the generated decoder will find too
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return &requestError{detail: "cannot read the request body", err: err}
	}
	r.Body = http.NoBody
	if len(data) == 0 {
		return nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return badRequest("the body is blank: send no body, or a JSON object")
	}
	v, err := decodeStrict(data, fields)
	if err != nil {
		return err
	}
	r.Body = decodedBody{v}
	return nil
}

// decodedBody is a request body that strictJSON decoded: the generated
// decoder binds its ValidatedValue (oapi-codegen runtime's hook). Reading it
// fails, so that nothing decodes a body twice unnoticed.
type decodedBody struct{ value map[string]any }

func (b decodedBody) ValidatedValue() any { return b.value }
func (decodedBody) Read([]byte) (int, error) {
	return 0, errors.New("server: the body was decoded already")
}
func (decodedBody) Close() error { return nil }

// decodeStrict decodes data, a non-blank body, into the generic JSON value
// of an object (numbers as json.Number), checked as strictJSON says, or
// returns a *requestError. encoding/json alone would match names
// case-insensitively and let the last duplicate win.
func decodeStrict(data []byte, fields map[string]string) (map[string]any, error) {
	if !utf8.Valid(data) {
		return nil, badRequest("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil {
		return nil, jsonError(err)
	} else if tok != json.Delim('{') {
		return nil, badRequest("the body must be a JSON object")
	}
	obj := make(map[string]any, len(fields))
	var typeErr error // the first member of a wrong type, reported after the shape
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonError(err)
		}
		name, _ := tok.(string)
		want, known := fields[name]
		if !known {
			return nil, badRequest("unknown field %q", truncate(name, 64))
		}
		if _, dup := obj[name]; dup {
			return nil, badRequest("duplicate field %q", name)
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, jsonError(err)
		}
		v, err = checkType(name, v, want)
		obj[name] = v
		if typeErr == nil {
			typeErr = err
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, badRequest("unexpected data after the JSON object")
	}
	return obj, typeErr
}

// checkType returns the decoded JSON value v of member name, or a
// *requestError unless it is of type want (jsonInteger, jsonString or jsonNames). As in
// JSON Schema, an integer may be written with a zero fraction or an exponent
// (5000.0, 1e4): it is returned in its plain form, which the generated
// decoder binds. null is refused, as the schema's types are: a member left
// out has its default. The error names the JSON type as encoding/json's do.
func checkType(name string, v any, want string) (any, error) {
	got := "object"
	switch v := v.(type) {
	case nil:
		got = "null"
	case string:
		if want == jsonString {
			return v, nil
		}
		got = "string"
	case json.Number:
		if i, ok := integral(v); ok && want == jsonInteger {
			return json.Number(strconv.FormatInt(i, 10)), nil
		}
		got = "number " + string(v)
	case bool:
		got = "bool"
	case []any:
		if want == jsonNames && !slices.ContainsFunc(v, func(e any) bool { _, ok := e.(string); return !ok }) {
			return v, nil
		}
		got = "array"
		if want == jsonNames {
			got = "array with a member that is not a string"
		}
	}
	return v, badRequest("%s must be %s, not JSON %s", name, want, got)
}

// integral returns the integer that n is, if it is one and fits exactly.
func integral(n json.Number) (int64, bool) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, true
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// jsonError describes a JSON syntax error for the client.
func jsonError(err error) error {
	var syntaxErr *json.SyntaxError
	detail := "malformed JSON"
	switch {
	case errors.As(err, &syntaxErr):
		detail += ": " + syntaxErr.Error()
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		detail += ": unexpected end of the body"
	}
	return &requestError{detail: detail, err: err}
}

// truncate returns s, valid UTF-8, cut to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
