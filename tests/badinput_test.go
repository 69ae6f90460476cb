package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// outcome is one acceptable answer to a bad request.
type outcome struct {
	status int
	kind   string
}

var (
	invalid     = outcome{http.StatusBadRequest, "invalid-request"}
	tooLarge    = outcome{http.StatusRequestEntityTooLarge, "payload-too-large"}
	notFound    = outcome{http.StatusNotFound, "not-found"}
	notAllowed  = outcome{http.StatusMethodNotAllowed, "method-not-allowed"}
	heldTTL     = int64(20000)
	badInputTTL = "50s" // --default-ttl: a request wrongly taken as "defaults" shows in PTTL
)

type badCase struct {
	name         string
	method, path string
	body         string
	hdr          []string
	chunked      bool      // send the body without Content-Length
	want         []outcome // any of these
}

// TestBadInput: a malformed request (a bad body, resource name or Lock-Token,
// a body over 16 KiB, headers far over the limit, an unknown path or method)
// gets its 4xx problem (400 invalid-request, 413, 404, 405 with Allow, 431)
// and changes no lock: no key is created, deleted or rewritten on any node,
// and the held lock is neither released nor extended (openapi.yaml
// info.description "Conventions", "Request bodies" and
// "Behaviour where the specification is silent").
func TestBadInput(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes, "--default-ttl", badInputTTL)

	held := resourceName(t)
	a := lock(t, gw, held, fmt.Sprintf(`{"ttl_ms":%d,"owner":"keeper"}`, heldTTL))
	tok := a.str(t, "token")
	free := resourceName(t)
	H, F := "/locks/"+held, "/locks/"+free
	lt := func(v string) []string { return []string{"Lock-Token", v} }
	goodTok := lt(tok)
	big := `{"owner":"` + strings.Repeat("x", 16*1024) + `"}`
	justOver := `{"ttl_ms":5000}`
	justOver += strings.Repeat(" ", 16*1024+1-len(justOver))

	cases := []badCase{
		// Bodies of POST.
		{name: "BadJSON", method: "POST", path: F, body: `{`, want: []outcome{invalid}},
		{name: "BadJSONValue", method: "POST", path: F, body: `{"ttl_ms":}`, want: []outcome{invalid}},
		{name: "NotJSON", method: "POST", path: F, body: `ttl_ms=1000`, want: []outcome{invalid}},
		{name: "TTLString", method: "POST", path: F, body: `{"ttl_ms":"x"}`, want: []outcome{invalid}},
		{name: "TTLNumericString", method: "POST", path: F, body: `{"ttl_ms":"1000"}`, want: []outcome{invalid}},
		{name: "TTLFraction", method: "POST", path: F, body: `{"ttl_ms":1500.5}`, want: []outcome{invalid}},
		{name: "TTLBool", method: "POST", path: F, body: `{"ttl_ms":true}`, want: []outcome{invalid}},
		{name: "WaitString", method: "POST", path: F, body: `{"wait_ms":"x"}`, want: []outcome{invalid}},
		{name: "TokenNumber", method: "POST", path: F, body: `{"token":123}`, want: []outcome{invalid}},
		{name: "OwnerNumber", method: "POST", path: F, body: `{"owner":42}`, want: []outcome{invalid}},
		{name: "OwnerList", method: "POST", path: F, body: `{"owner":["a"]}`, want: []outcome{invalid}},
		{name: "ArrayBody", method: "POST", path: F, body: `[]`, want: []outcome{invalid}},
		{name: "StringBody", method: "POST", path: F, body: `"x"`, want: []outcome{invalid}},
		{name: "NumberBody", method: "POST", path: F, body: `42`, want: []outcome{invalid}},
		{name: "UnknownField", method: "POST", path: F, body: `{"bogus":1}`, want: []outcome{invalid}},
		{name: "UnknownNullField", method: "POST", path: F, body: `{"ttl_ms":1000,"extra":null}`, want: []outcome{invalid}},
		{name: "CaseVariantField", method: "POST", path: F, body: `{"TTL_MS":1000}`, want: []outcome{invalid}},
		{name: "TrailingObject", method: "POST", path: F, body: `{"ttl_ms":1000}{}`, want: []outcome{invalid}},
		{name: "TrailingGarbage", method: "POST", path: F, body: `{"ttl_ms":1000} x`, want: []outcome{invalid}},
		{name: "TTLNegative", method: "POST", path: F, body: `{"ttl_ms":-1}`, want: []outcome{invalid}},
		{name: "TTLZero", method: "POST", path: F, body: `{"ttl_ms":0}`, want: []outcome{invalid}},
		{name: "TTLBelowMin", method: "POST", path: F, body: `{"ttl_ms":99}`, want: []outcome{invalid}},
		{name: "TTLAboveMax", method: "POST", path: F, body: `{"ttl_ms":60001}`, want: []outcome{invalid}},
		{name: "TTLOverflow", method: "POST", path: F, body: `{"ttl_ms":99999999999999999999}`, want: []outcome{invalid}},
		{name: "WaitNegative", method: "POST", path: F, body: `{"wait_ms":-1}`, want: []outcome{invalid}},
		{name: "WaitAboveMax", method: "POST", path: F, body: `{"wait_ms":60001}`, want: []outcome{invalid}},
		{name: "TokenTooShort", method: "POST", path: F, body: `{"token":"abcdefghijklmnopqrstu"}`, want: []outcome{invalid}},
		{name: "TokenTooLong", method: "POST", path: F, body: fmt.Sprintf(`{"token":%q}`, strings.Repeat("t", 129)), want: []outcome{invalid}},
		{name: "TokenEmpty", method: "POST", path: F, body: `{"token":""}`, want: []outcome{invalid}},
		{name: "TokenPlus", method: "POST", path: F, body: `{"token":"abcdefghijklmnopqrstuvw+"}`, want: []outcome{invalid}},
		{name: "TokenPadding", method: "POST", path: F, body: `{"token":"abcdefghijklmnopqrstuvw="}`, want: []outcome{invalid}},
		{name: "TokenSpace", method: "POST", path: F, body: `{"token":"abcdefghijk mnopqrstuvwx"}`, want: []outcome{invalid}},
		{name: "TokenDot", method: "POST", path: F, body: `{"token":"abcdefghijk.mnopqrstuvwx"}`, want: []outcome{invalid}},
		{name: "OwnerTooLong", method: "POST", path: F, body: fmt.Sprintf(`{"owner":%q}`, strings.Repeat("o", 257)), want: []outcome{invalid}},
		// A bad body on the held resource neither steals nor resets it.
		{name: "HeldBadJSON", method: "POST", path: H, body: `{"ttl_ms":`, want: []outcome{invalid}},
		{name: "HeldUnknownFieldWithToken", method: "POST", path: H, body: fmt.Sprintf(`{"token":%q,"ttl_ms":40000,"x":1}`, tok), want: []outcome{invalid}},
		{name: "HeldTTLAboveMaxWithToken", method: "POST", path: H, body: fmt.Sprintf(`{"token":%q,"ttl_ms":60001}`, tok), want: []outcome{invalid}},

		// Resource names.
		{name: "NameEncodedSlash", method: "POST", path: "/locks/a%2Fb", want: []outcome{invalid}},
		{name: "NameTooLong", method: "POST", path: "/locks/" + strings.Repeat("n", 201), want: []outcome{invalid}},
		{name: "NameSpace", method: "POST", path: "/locks/a%20b", want: []outcome{invalid}},
		{name: "NameUnicode", method: "POST", path: "/locks/caf%C3%A9", want: []outcome{invalid}},
		{name: "NameNUL", method: "POST", path: "/locks/a%00b", want: []outcome{invalid}},
		{name: "NameStar", method: "POST", path: "/locks/a*b", want: []outcome{invalid}},
		// An empty name is no path of openapi.yaml (/locks is the listing).
		{name: "NameEmpty", method: "POST", path: "/locks/", want: []outcome{notFound}},
		// "." and "..": clients normalise them away, so such a lock could
		// never be released.
		{name: "NameDot", method: "POST", path: "/locks/.", want: []outcome{invalid}},
		{name: "NameDotDot", method: "POST", path: "/locks/..", want: []outcome{invalid}},
		{name: "NameDotEncoded", method: "POST", path: "/locks/%2E", want: []outcome{invalid}},
		{name: "NameDotDotEncoded", method: "POST", path: "/locks/%2e%2e", want: []outcome{invalid}},
		{name: "NameDotDotHalfEncoded", method: "POST", path: "/locks/.%2E", body: `{"ttl_ms":40000}`, want: []outcome{invalid}},
		{name: "GetNameDotDot", method: "GET", path: "/locks/%2e%2e", want: []outcome{invalid}},
		{name: "DeleteNameDotDot", method: "DELETE", path: "/locks/..", hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchNameDot", method: "PATCH", path: "/locks/%2E", hdr: goodTok, want: []outcome{invalid}},
		{name: "GetNameEncodedSlash", method: "GET", path: "/locks/a%2Fb", want: []outcome{invalid}},
		{name: "DeleteNameSpace", method: "DELETE", path: "/locks/a%20b", hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchNameTooLong", method: "PATCH", path: "/locks/" + strings.Repeat("n", 201), hdr: goodTok, want: []outcome{invalid}},

		// Sizes.
		{name: "BodyTooLarge", method: "POST", path: F, body: big, want: []outcome{tooLarge}},
		{name: "BodyOneByteOver", method: "POST", path: F, body: justOver, want: []outcome{tooLarge}},
		{name: "BodyTooLargeChunked", method: "POST", path: F, body: big, chunked: true, want: []outcome{tooLarge}},
		{name: "PatchBodyTooLarge", method: "PATCH", path: H, body: big, hdr: goodTok, want: []outcome{tooLarge}},

		// Methods and paths.
		{name: "Put", method: "PUT", path: H, body: `{}`, want: []outcome{notAllowed}},
		{name: "PostHealthz", method: "POST", path: "/healthz", want: []outcome{notAllowed}},
		{name: "UnknownPath", method: "GET", path: "/nope", want: []outcome{notFound}},
		{name: "LockSubpath", method: "GET", path: H + "/x", want: []outcome{notFound}},
		{name: "DeleteLockSubpath", method: "DELETE", path: H + "/x", hdr: goodTok, want: []outcome{notFound}},
		{name: "LocksRoot", method: "PUT", path: "/locks", want: []outcome{notAllowed}},
		{name: "LocksRootNoBody", method: "POST", path: "/locks", want: []outcome{invalid}},

		// Lock-Token.
		{name: "DeleteNoToken", method: "DELETE", path: H, want: []outcome{invalid}},
		{name: "DeleteTokenInQuery", method: "DELETE", path: H + "?token=" + tok, want: []outcome{invalid}},
		{name: "DeleteShortToken", method: "DELETE", path: H, hdr: lt("short"), want: []outcome{invalid}},
		{name: "DeleteLongToken", method: "DELETE", path: H, hdr: lt(strings.Repeat("t", 129)), want: []outcome{invalid}},
		{name: "DeleteBadCharToken", method: "DELETE", path: H, hdr: lt("abcdefghijk mnopqrstuvwx"), want: []outcome{invalid}},
		{name: "DeleteTokenWithPrefix", method: "DELETE", path: H, hdr: lt("Bearer " + tok), want: []outcome{invalid}},
		{name: "PatchNoToken", method: "PATCH", path: H, body: `{"ttl_ms":40000}`, want: []outcome{invalid}},
		{name: "PatchShortToken", method: "PATCH", path: H, body: `{"ttl_ms":40000}`, hdr: lt("short"), want: []outcome{invalid}},
		{name: "PatchBadCharToken", method: "PATCH", path: H, body: `{"ttl_ms":40000}`, hdr: lt("abcdefghijk/mnopqrstuvwx"), want: []outcome{invalid}},

		// Bodies of PATCH with the right token: the lock is not extended.
		{name: "PatchBadJSON", method: "PATCH", path: H, body: `{`, hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchTTLString", method: "PATCH", path: H, body: `{"ttl_ms":"40000"}`, hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchTTLBelowMin", method: "PATCH", path: H, body: `{"ttl_ms":50}`, hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchTTLAboveMax", method: "PATCH", path: H, body: `{"ttl_ms":60001}`, hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchTTLNegative", method: "PATCH", path: H, body: `{"ttl_ms":-40000}`, hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchUnknownField", method: "PATCH", path: H, body: `{"ttl_ms":40000,"bogus":true}`, hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchWaitField", method: "PATCH", path: H, body: `{"ttl_ms":40000,"wait_ms":10}`, hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchTokenField", method: "PATCH", path: H, body: fmt.Sprintf(`{"ttl_ms":40000,"token":%q}`, tok), hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchTrailing", method: "PATCH", path: H, body: `{"ttl_ms":40000}{}`, hdr: goodTok, want: []outcome{invalid}},
		{name: "PatchArray", method: "PATCH", path: H, body: `[40000]`, hdr: goodTok, want: []outcome{invalid}},
	}

	waitHolders(t, nodes, held, tok, 5) // the snapshot sees no late write
	before := keySnapshot(t, nodes)
	if !containsLockKey(before, held) {
		t.Fatalf("held lock key not in the snapshot:\n%s", before)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.send(t, gw)
			if r.Status >= 500 {
				t.Fatalf("5xx for bad input: %v", r)
			}
			ok := false
			for _, w := range c.want {
				ok = ok || r.Status == w.status
			}
			if !ok {
				t.Fatalf("%v: status %d, want one of %v", r, r.Status, c.want)
			}
			for _, w := range c.want {
				if r.Status == w.status {
					wantProblem(t, r, w.status, w.kind)
				}
			}
			if r.Status == http.StatusMethodNotAllowed && r.Header.Get("Allow") == "" {
				t.Errorf("405 without an Allow header (RFC 9110 §15.5.6)")
			}
			wantNoSecret(t, r, tok)
			if after := keySnapshot(t, nodes); after != before {
				t.Fatalf("lock state changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			wantNotExtended(t, nodes, held)
		})
	}

	t.Run("HeaderTooLarge", func(t *testing.T) {
		req, err := newRequest(gw.URL+H, http.MethodDelete, "", "Lock-Token", tok, "X-Pad", strings.Repeat("p", 2<<20))
		if err != nil {
			t.Fatal(err)
		}
		r := send(t, req)
		if r.Status < 400 || r.Status >= 500 {
			t.Fatalf("2 MiB header: status %d, want 4xx", r.Status)
		}
		if after := keySnapshot(t, nodes); after != before {
			t.Fatalf("lock state changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})

	// The held lock is still held by its owner, untouched.
	i := inspect(t, gw, held)
	wantStatus(t, i, http.StatusOK)
	if got, want := i.num(t, "fencing_token"), a.num(t, "fencing_token"); got != want {
		t.Errorf("fencing_token %d, want %d", got, want)
	}
	if got := i.str(t, "owner"); got != "keeper" {
		t.Errorf("owner %q, want keeper", got)
	}
	if got := holders(t, nodes, held, tok); len(got) != 5 {
		t.Errorf("token on nodes %v, want all 5", got)
	}
	// And the gateway is still serving.
	wantStatus(t, release(t, gw, held, tok), http.StatusNoContent)
	lock(t, gw, free, "")
}

func (c badCase) send(t *testing.T, gw *Gateway) *Resp {
	t.Helper()
	if !c.chunked {
		return gw.do(t, c.method, c.path, c.body, c.hdr...)
	}
	req, err := newRequest(gw.URL+c.path, c.method, "", c.hdr...)
	if err != nil {
		t.Fatal(err)
	}
	req.Body = io.NopCloser(io.MultiReader(strings.NewReader(c.body))) // unknown length: chunked
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	r := send(t, req)
	if r.Header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s → %d: no X-Request-Id header", c.method, c.path, r.Status)
	}
	return r
}

// wantNotExtended checks that no node's PTTL of resource's key exceeds the
// TTL it was taken with: a wrongly accepted PATCH or POST would have set
// 40000 ms or the 50 s default.
func wantNotExtended(t *testing.T, nodes []*RedisNode, resource string) {
	t.Helper()
	for i, n := range nodes {
		pttl, err := n.Client().PTTL(context.Background(), lockKey(resource)).Result()
		if err != nil {
			t.Fatalf("node %d: PTTL: %v", i, err)
		}
		if pttl > time.Duration(heldTTL)*time.Millisecond {
			t.Errorf("node %d: PTTL %v > the lock's TTL %d ms: it was extended", i, pttl, heldTTL)
		}
	}
}
