package server

import (
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/redlockd/redlockd/api"
)

// checkLockCreated fails the test unless lockCreated answers exactly what
// the generated 201 response answers for l: status, headers and body.
func checkLockCreated(t *testing.T, l api.LockResponse, location string) {
	t.Helper()
	gen := api.AcquireLock201JSONResponse{Body: l, Headers: api.AcquireLock201ResponseHeaders{Location: location}}
	want, got := httptest.NewRecorder(), httptest.NewRecorder()
	if err := gen.VisitAcquireLockResponse(want); err != nil {
		t.Fatal(err)
	}
	if err := lockCreated(gen).VisitAcquireLockResponse(got); err != nil {
		t.Fatal(err)
	}
	if got.Code != want.Code || !reflect.DeepEqual(got.Header(), want.Header()) || got.Body.String() != want.Body.String() {
		t.Fatalf("lockCreated answered\n%d %v %q\nthe generated response\n%d %v %q",
			got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
	}
}

func TestLockCreated(t *testing.T) {
	base := api.LockResponse{ExpiresAt: "2026-11-22T10:59:02.728Z", FencingToken: 42, LockedNodes: 5, Nodes: 5,
		Quorum: 3, Resource: "orders/eu-1", Token: "tAu9dbbUuUWugg_HlZdgAw", TTLMs: 30000, ValidityMs: 29692}
	checkLockCreated(t, base, "/locks/orders%2Feu-1")
	checkLockCreated(t, api.LockResponse{}, "")
	extreme := base
	extreme.FencingToken, extreme.TTLMs, extreme.ValidityMs = math.MaxInt64, math.MinInt64, -1
	extreme.LockedNodes, extreme.Nodes, extreme.Quorum = math.MaxInt, math.MinInt, 0
	checkLockCreated(t, extreme, "/locks/x")
	// Strings that encoding/json escapes take its path, with the same result.
	for _, s := range []string{`a"b`, `a\b`, "<x>", "a&b", "tab\there", "é", "\u2028", "\xff", "\x7f", ""} {
		l := base
		l.Resource, l.Token, l.ExpiresAt = s, s, s
		checkLockCreated(t, l, "/locks/"+s)
	}
	// Random printable ASCII, which it writes itself.
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		l := base
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(0x20 + r.IntN(0x5f))
		}
		l.Resource, l.FencingToken, l.ValidityMs = string(b), r.Int64()-math.MaxInt64/2, r.Int64N(1e6)
		checkLockCreated(t, l, "/locks/"+string(b))
	}
}

func TestPlainJSON(t *testing.T) {
	for c := range 256 {
		want := c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
		if got := plainJSON(string([]byte{byte(c)})); got != want {
			t.Errorf("plainJSON(%q) = %v, want %v", byte(c), got, want)
		}
	}
}
