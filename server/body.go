package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
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

// readJSONBody reads the body of r and returns its JSON value (numbers as
// json.Number), and whether it has one (not if it is empty); it leaves
// r.Body drained (the caller replaces it). It checks what JSON Schema cannot
// say: one JSON value in UTF-8, with nothing after it, and an object (the
// body; its members are never objects) naming no member twice, where
// encoding/json would let the last one win. It returns a *requestError.
func readJSONBody(r *http.Request) (v any, ok bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, false, nil
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, false, &requestError{detail: "cannot read the request body", err: err}
	}
	r.Body = http.NoBody
	switch {
	case len(data) == 0:
		return nil, false, nil
	case len(bytes.TrimSpace(data)) == 0:
		return nil, false, badRequest("the body is blank: send no body, or a JSON object")
	case !utf8.Valid(data):
		return nil, false, badRequest("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, false, jsonError(err)
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
		return nil, false, badRequest("unexpected data after the JSON value")
	}
	if obj, isObj := v.(map[string]any); isObj && countMembers(data) != len(obj) {
		return nil, false, duplicateMember(data)
	}
	return v, true, nil
}

// countMembers counts the members of the JSON object that data, valid JSON,
// holds: the colons outside strings at depth 1.
func countMembers(data []byte) int {
	n, depth, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ':' && depth == 1:
			n++
		}
	}
	return n
}

// duplicateMember is the error of data, a valid JSON object that names a
// member twice.
func duplicateMember(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	seen := map[string]bool{}
	_, _ = dec.Token() // {
	for dec.More() {
		tok, _ := dec.Token()
		name, _ := tok.(string)
		if seen[name] {
			return badRequest("duplicate member %q", truncate(name, 64))
		}
		seen[name] = true
		var skip json.RawMessage
		_ = dec.Decode(&skip)
	}
	return badRequest("duplicate member")
}

// plainIntegers returns v with each number that is an integer written with
// a fraction or an exponent (5000.0, 1e4: integers to JSON Schema) written
// plainly, as the generated decoder binds integers. v has passed its schema,
// so such a number is an integer where the schema asks for one.
func plainIntegers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			if f, err := v.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
				return json.Number(strconv.FormatInt(int64(f), 10))
			}
		}
	case map[string]any:
		for k, e := range v {
			v[k] = plainIntegers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = plainIntegers(e)
		}
	}
	return v
}

// decodedBody is a request body that validateRequest decoded and validated:
// the generated decoder binds its ValidatedValue (oapi-codegen runtime's hook
// for kin-openapi's validated bodies). Reading it fails, so that nothing
// decodes a body twice unnoticed.
type decodedBody struct{ value any }

func (b decodedBody) ValidatedValue() any { return b.value }
func (decodedBody) Read([]byte) (int, error) {
	return 0, errors.New("server: the body was decoded already")
}
func (decodedBody) Close() error { return nil }

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
