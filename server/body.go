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
// r.Body drained (the caller replaces it). It checks what JSON Schema cannot say: one JSON
// value in UTF-8, with no member named twice in an object and nothing
// after it. It returns a *requestError.
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
	if v, err = decodeValue(dec); err != nil {
		return nil, false, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false, badRequest("unexpected data after the JSON value")
	}
	return v, true, nil
}

// decodeValue decodes the next JSON value of dec as encoding/json decodes
// into an any, but refuses an object that names a member twice (which
// encoding/json would let the last one win).
func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonError(err)
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, jsonError(err)
			}
			name, _ := tok.(string)
			if _, dup := obj[name]; dup {
				return nil, badRequest("duplicate member %q", truncate(name, 64))
			}
			if obj[name], err = decodeValue(dec); err != nil {
				return nil, err
			}
		}
		_, err = dec.Token() // '}'
		return obj, jsonError(err)
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err = dec.Token() // ']'
		return arr, jsonError(err)
	}
	return tok, nil
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

// jsonError describes a JSON syntax error for the client; nil if err is.
func jsonError(err error) error {
	if err == nil {
		return nil
	}
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
