package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// TestDecodeStrictDetails: the problem detail of each kind of body that
// validateRequest refuses, through the whole handler: each names the member
// at fault and the rule of openapi.yaml it breaks, never its value.
func TestDecodeStrictDetails(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	for body, detail := range map[string]string{
		`{"ttl": 5000}`:                                `the body: unknown member "ttl"`,
		`{"TTL_MS": 1}`:                                `the body: unknown member "TTL_MS"`,
		`{"ttl_ms": 1, "ttl_ms": 2}`:                   `duplicate member "ttl_ms"`,
		`{"ttl\u005fms": 1, "ttl_ms": 2}`:              `duplicate member "ttl_ms"`,
		`{"owner": null, "owner": "x"}`:                `duplicate member "owner"`,
		`{"ttl_ms": "x", "bogus": 1}`:                  `the body: unknown member "bogus"`,
		`{"ttl_ms": "x", "wait_ms": true}`:             `ttl_ms: value must be an integer`,
		`{"ttl_ms": 1.5}`:                              `ttl_ms: value must be an integer`,
		`{"ttl_ms": 1e-3}`:                             `ttl_ms: value must be an integer`,
		`{"ttl_ms": null}`:                             `ttl_ms: must not be null: leave the member out for its default`,
		`{"owner": null}`:                              `owner: must not be null: leave the member out for its default`,
		" \n\t ":                                       `the body is blank: send no body, or a JSON object`,
		`{"ttl_ms": 99999999999999999999}`:             `ttl_ms: integer doesn't match the format "int64" (value should be between -9223372036854775808 and 9223372036854775807)`,
		`{"wait_ms": [1]}`:                             `wait_ms: value must be an integer`,
		`{"token": 5}`:                                 `token: value must be a string`,
		`{"token": "abc"}`:                             `token: minimum string length is 22`,
		`{"token": "` + strings.Repeat("+", 22) + `"}`: `token: must match ^[A-Za-z0-9_-]{22,128}$`,
		`{"owner": {"a": 1}}`:                          `owner: value must be a string`,
		`{"owner": true}`:                              `owner: value must be a string`,
		`{"mode": "READ"}`:                             `mode: value is not one of the allowed values ["read","write"]`,
		`{"ttl_ms": 99}`:                               `ttl_ms: number must be at least 100`,
		`{} x`:                                         `unexpected data after the JSON value`,
		`{}{}`:                                         `unexpected data after the JSON value`,
		`[]`:                                           `the body: value must be an object`,
		`null`:                                         `the body: must be a JSON object, not null`,
		`"x"`:                                          `the body: value must be an object`,
		`{"ttl_ms":1`:                                  `malformed JSON: unexpected end of the body`,
		`{"ttl_ms":}`:                                  `malformed JSON: invalid character '}' looking for beginning of value`,
		`{1: 2}`:                                       `malformed JSON: invalid character '1' looking for beginning of object key string`,
		"{\"owner\": \"\xff\"}":                        `the body is not valid UTF-8`,
		`{"` + strings.Repeat("x", 100) + `": 1}`: `the body: unknown member "` + strings.Repeat("x", 64) + `…"`,
	} {
		p := checkProblem(t, serve(t, h, request{method: "POST", target: "/locks/x", body: body}), http.StatusBadRequest, "invalid-request")
		if p.Detail != detail {
			t.Errorf("%s: detail %q, want %q", body, p.Detail, detail)
		}
	}
}

// TestDecodeStrictValues: the members validateRequest decoded reach the handler
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
		` { "owner" : "o" , "ttl_ms" : -0e0 } `:       {},                                       // -0e0 is no integer: refused
		`{"owner": "a:\"b\\\":{c}[", "ttl_ms": 1000}`: {TTL: time.Second, Owner: `a:"b\":{c}[`}, // one member, whatever the string holds
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
