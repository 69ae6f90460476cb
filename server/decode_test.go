package server

import (
	"context"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// TestDecodeStrictDetails: the problem detail of each kind of body that
// strictJSON refuses, through the whole handler.
func TestDecodeStrictDetails(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	for body, detail := range map[string]string{
		`{"ttl": 5000}`:                    `unknown field "ttl"`,
		`{"TTL_MS": 1}`:                    `unknown field "TTL_MS"`,
		`{"ttl_ms": 1, "ttl_ms": 2}`:       `duplicate field "ttl_ms"`,
		`{"ttl\u005fms": 1, "ttl_ms": 2}`:  `duplicate field "ttl_ms"`,
		`{"owner": null, "owner": "x"}`:    `duplicate field "owner"`,
		`{"ttl_ms": "x", "bogus": 1}`:      `unknown field "bogus"`,
		`{"ttl_ms": "x", "wait_ms": true}`: `ttl_ms must be an integer, not JSON string`,
		`{"ttl_ms": 1.5}`:                  `ttl_ms must be an integer, not JSON number 1.5`,
		`{"ttl_ms": 1e-3}`:                 `ttl_ms must be an integer, not JSON number 1e-3`,
		`{"ttl_ms": null}`:                 `ttl_ms must be an integer, not JSON null`,
		`{"owner": null}`:                  `owner must be a string, not JSON null`,
		" \n\t ":                           `the body is blank: send no body, or a JSON object`,
		`{"ttl_ms": 99999999999999999999}`: `ttl_ms must be an integer, not JSON number 99999999999999999999`,
		`{"wait_ms": [1]}`:                 `wait_ms must be an integer, not JSON array`,
		`{"token": 5}`:                     `token must be a string, not JSON number 5`,
		`{"owner": {"a": 1}}`:              `owner must be a string, not JSON object`,
		`{"owner": true}`:                  `owner must be a string, not JSON bool`,
		`{} x`:                             `unexpected data after the JSON object`,
		`{}{}`:                             `unexpected data after the JSON object`,
		`[]`:                               `the body must be a JSON object`,
		`null`:                             `the body must be a JSON object`,
		`"x"`:                              `the body must be a JSON object`,
		`{"ttl_ms":1`:                      `malformed JSON: unexpected end of the body`,
		`{"ttl_ms":}`:                      `malformed JSON: invalid character '}' looking for beginning of value`,
		`{1: 2}`:                           `malformed JSON: invalid character '1'`,
		"{\"owner\": \"\xff\"}":            `the body is not valid UTF-8`,
		`{"` + strings.Repeat("x", 100) + `": 1}`: `unknown field "` + strings.Repeat("x", 64) + `…"`,
	} {
		p := checkProblem(t, serve(t, h, request{method: "POST", target: "/locks/x", body: body}), http.StatusBadRequest, "invalid-request")
		if p.Detail != detail {
			t.Errorf("%s: detail %q, want %q", body, p.Detail, detail)
		}
	}
}

// TestDecodeStrictValues: the members strictJSON decoded reach the handler
// through the generated decoder, an empty body meaning defaults and
// integers written as JSON Schema allows (5000.0, 1e4) taken as such.
func TestDecodeStrictValues(t *testing.T) {
	f := newFake(t)
	got := make(chan redlock.AcquireOptions, 1)
	f.AcquireFn = func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		got <- o
		return testLock(resource, tokenA, o.TTL), nil
	}
	var ttl time.Duration
	f.ExtendFn = func(_ context.Context, _, resource, token string, d time.Duration) (redlock.Lock, error) {
		ttl = d
		return testLock(resource, token, d), nil
	}
	_, h := newHandler(f, nil)
	for body, exp := range map[string]redlock.AcquireOptions{
		``:                                   {TTL: 30 * time.Second},
		`{}`:                                 {TTL: 30 * time.Second},
		`{"ttl_ms": 5000.0, "wait_ms": 0.0}`: {TTL: 5 * time.Second},
		`{"ttl_ms": 1e4}`:                    {TTL: 10 * time.Second},
		`{"ttl_ms": 12.5e2}`:                 {TTL: 1250 * time.Millisecond},
		`{"ttl_ms": 10000, "wait_ms": 0, "owner": "h\u00e9/1 \"x\"", "token": "` + tokenA + `"}`: {
			TTL: 10 * time.Second, Owner: `hé/1 "x"`, Token: tokenA},
		` { "owner" : "o" , "ttl_ms" : -0e0 } `: {}, // -0e0 is no integer: refused
	} {
		w := serve(t, h, request{method: "POST", target: "/locks/x", body: body})
		if exp.TTL == 0 {
			checkProblem(t, w, http.StatusBadRequest, "invalid-request")
			continue
		}
		decode[map[string]any](t, w, http.StatusCreated)
		if o := <-got; o != exp {
			t.Errorf("%q: options %+v, want %+v", body, o, exp)
		}
	}
	w := serve(t, h, request{method: "PATCH", target: "/locks/x", body: `{"ttl_ms": 12345}`, headers: []string{"Lock-Token", tokenA}})
	if decode[map[string]any](t, w, http.StatusOK); ttl != 12345*time.Millisecond {
		t.Errorf("extend: ttl %v", ttl)
	}
}

// TestBodyFields: bodyFields lists exactly the members of the generated
// request bodies, each with the JSON type of its Go field.
func TestBodyFields(t *testing.T) {
	for op, typ := range map[string]reflect.Type{
		"POST /locks/{resource}":  reflect.TypeFor[api.AcquireRequest](),
		"PATCH /locks/{resource}": reflect.TypeFor[api.ExtendRequest](),
	} {
		want := map[string]string{}
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			want[name] = map[reflect.Kind]string{reflect.Int64: jsonInteger, reflect.String: jsonString}[ft.Kind()]
		}
		if !maps.Equal(bodyFields[op], want) {
			t.Errorf("bodyFields[%q] = %v, want %v", op, bodyFields[op], want)
		}
	}
}
