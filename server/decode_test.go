package server

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redlockd/redlockd/api"
)

// decodeStrictSlow is decodeStrict without its fast path, decodeFlat. The
// tests below check that decodeStrict accepts, decodes and rejects exactly as
// it does, with the same details.
func decodeStrictSlow(data []byte, dst any, fields map[string]int) error {
	if isBlank(data) {
		return nil
	}
	if !utf8.Valid(data) {
		return badRequest("the body is not valid UTF-8")
	}
	return decodeTokens(data, dst, fields)
}

// decodeBodies are request bodies, good and bad, for both decoders.
var decodeBodies = []string{
	``, ` `, "\n\t ", `{}`, ` { } `, `{"ttl_ms":10000,"wait_ms":0}`,
	`{"ttl_ms": 30000, "wait_ms": 1000, "owner": "host-1/4242", "token": "` + tokenA + `"}`,
	`{"ttl_ms": null}`, `{"owner": null, "token": null}`, `{"owner": "\u00e9\ud800\n"}`,
	`{"ttl_ms": "x", "bogus": 1}`, `{"ttl_ms": "x", "wait_ms": true}`, `{"wait_ms": true, "ttl_ms": "x"}`,
	`{"ttl_ms": "x", "ttl_ms": 1}`, `{"ttl_ms": "x"} x`, `{"ttl_ms": "x",}`, `{"ttl_ms": 1.5, "owner": [1]}`,
	`{"owner": {"a": [1, {"b": 2}]}}`, `{"token": 5}`, `{"ttl_ms": -0}`, `{"ttl_ms": 01}`, `{"ttl_ms": 1e3}`,
	`{"ttl_ms": 99999999999999999999}`, `{"ttl_ms": -9223372036854775808}`, `{"TTL_MS": 1}`,
	`{"ttl_ms" 1}`, `{"ttl_ms":}`, `{"ttl_ms":1`, `{"ttl_ms":1,`, `{`, `}`, `[]`, `[1]`, `null`, `"x"`, `1`,
	`{}{}`, `{}}`, `{} `, `{}]`, "{\"owner\": \"\xff\"}", "{\"owner\": \"a\x01\"}", `{"` + strings.Repeat("x", 100) + `": 1}`,
	`{1: 2}`, `{"ttl_ms": tru}`, `{"ttl_ms": nul}`, `{"wait_ms": 5, "ttl_ms": 100}`,
	`{"ttl_ms":123456789012345678}`, `{"ttl_ms":-123456789012345678}`, `{"ttl_ms":1234567890123456789}`,
	`{"ttl_ms":9223372036854775807}`, `{"ttl_ms":-5}`, `{"ttl_ms":-}`, `{"ttl_ms":- 1}`, `{"ttl_ms":1 2}`,
	`{"ttl_ms":1}x`, `{"ttl_ms":1,}`, `{,"ttl_ms":1}`, `{"ttl_ms":1,,"wait_ms":2}`, `{"ttl_ms":10`, `{"owner":"abc`,
	`{"owner":"a"`, `{"owner":"a" "token":"b"}`, `{"ttl_ms"`, `{"ttl_ms":`, `{"owner":"a\"}`, "{\"owner\":\"a\tb\"}",
	"{\"owner\":\"\u00e9t\u00e9\"}", `{"owner":""}`, `{"ttl_ms":0}`, `{"ttl_ms":00}`, `{"ttl_ms":0.0}`, `{"ttl_ms":1E3}`,
	` { "ttl_ms" : 30000 , "owner" : "host-1/42 \"x\"" , "token" : null } `,
}

func TestDecodeStrictSameAsSlow(t *testing.T) {
	for _, body := range decodeBodies {
		checkDecodeStrict(t, []byte(body))
	}
	for _, tc := range badRequests {
		checkDecodeStrict(t, []byte(tc.req.body))
	}
}

// TestDecodeStrictSameAsSlowGenerated compares the decoders on bodies
// made of likely members: names right and wrong, values of every type,
// escapes and white space.
func TestDecodeStrictSameAsSlowGenerated(t *testing.T) {
	names := []string{`"ttl_ms"`, `"wait_ms"`, `"owner"`, `"token"`, `"TTL_MS"`, `"ttl\u005fms"`, `"x"`, `"own\"er"`, `""`}
	values := []string{`1`, `-1`, `0`, `-0`, `1.5`, `1e2`, `99999999999999999999`, `"a"`, `"a\"b"`, `"\\"`, `"a,}"`,
		`"` + tokenA + `"`, `null`, `true`, `false`, `{}`, `[1,"]"]`, `{"a":"}"}`, `""`}
	spaces := []string{"", " ", "\n\t "}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	for range 20000 {
		var b strings.Builder
		b.WriteString(pick(spaces) + "{")
		for j := range rng.IntN(4) {
			if j > 0 {
				b.WriteString(pick(spaces) + ",")
			}
			b.WriteString(pick(spaces) + pick(names) + pick(spaces) + ":" + pick(spaces) + pick(values) + pick(spaces))
		}
		b.WriteString("}" + pick(spaces))
		if rng.IntN(10) == 0 {
			b.WriteString(pick([]string{"x", "}", "{}", ","}))
		}
		checkDecodeStrict(t, []byte(b.String()))
	}
}

func FuzzDecodeStrict(f *testing.F) {
	for _, body := range decodeBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(checkDecodeStrict)
}

// checkDecodeStrict checks that decodeStrict and decodeStrictSlow agree on
// data, for both body types.
func checkDecodeStrict(t *testing.T, data []byte) {
	t.Helper()
	for key, body := range jsonBodies {
		got, exp := body.new(), body.new()
		gotErr, expErr := decodeStrict(data, got, body.fields), decodeStrictSlow(data, exp, body.fields)
		if detailOf(gotErr) != detailOf(expErr) {
			t.Fatalf("%s %q: got error %v, want %v", key, data, gotErr, expErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, exp) {
			t.Fatalf("%s %q: got %s, want %s", key, data, jsonOf(got), jsonOf(exp))
		}
	}
}

// detailOf returns the problem detail of a decodeStrict error, "" for nil.
func detailOf(err error) string {
	if err == nil {
		return ""
	}
	var req *requestError
	if !errors.As(err, &req) {
		return "not a *requestError: " + err.Error()
	}
	return req.detail
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestDecodeFlat checks that the bodies clients send take the fast path,
// that others do not, and that a body it leaves leaves dst as it was.
func TestDecodeFlat(t *testing.T) {
	fields := jsonBodies["POST /locks/{resource}"].fields
	for body, flat := range map[string]bool{
		`{"ttl_ms":10000,"wait_ms":0}`: true,
		`{}`:                           true,
		" {\n\t\"ttl_ms\" : 30000 , \"owner\" : \"host-1/42 é\" , \"wait_ms\":-1 } \n": true,
		`{"owner":"x","token":"` + tokenA + `"}`:                                       true,
		`{"ttl_ms":10000,"token":null}`:                                                false, // null
		`{"owner":"a\"b"}`:                                                             false, // an escape in a value
		`{"ttl\u005fms":10000}`:                                                        false, // an escape in a name
		`{"ttl_ms":10000,"ttl_ms":10000}`:                                              false,
		`{"ttl_ms":-0}`:                                                                false,
		`{"ttl_ms":1.0}`:                                                               false,
		`{"ttl_ms":1234567890123456789}`:                                               false, // 19 digits
		`{"ttl_ms":"10000"}`:                                                           false,
		`{"owner":1}`:                                                                  false,
		`{"owner":{}}`:                                                                 false,
		`{"TTL_MS":10000}`:                                                             false,
		`{"ttl_ms":10000}}`:                                                            false,
		`{"ttl_ms":10000`:                                                              false,
		`[]`:                                                                           false,
	} {
		dst := api.AcquireRequest{Owner: new(string)}
		if got := decodeFlat([]byte(body), &dst, fields); got != flat {
			t.Errorf("%s: got %t, want %t", body, got, flat)
		}
		if !flat && (dst.Owner == nil || dst.TTLMs != nil || dst.WaitMs != nil || dst.Token != nil) {
			t.Errorf("%s: dst changed: %s", body, jsonOf(dst))
		}
	}
	var dst api.AcquireRequest
	if !decodeFlat([]byte(`{"wait_ms":-42,"ttl_ms":123456789012345678,"owner":"o","token":"t"}`), &dst, fields) ||
		*dst.WaitMs != -42 || *dst.TTLMs != 123456789012345678 || *dst.Owner != "o" || *dst.Token != "t" {
		t.Errorf("decoded %s", jsonOf(dst))
	}
}
