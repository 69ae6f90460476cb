package server

import (
	"net/http"
	"strconv"

	"github.com/redlockd/redlockd/api"
)

// lockCreated is the 201 response to an acquire, the generated one with its
// body encoded by appendLock rather than by encoding/json's reflection: the
// same bytes, for the gateway's most frequent response.
type lockCreated api.AcquireLock201JSONResponse

func (r lockCreated) VisitAcquireLockResponse(w http.ResponseWriter) error {
	b, ok := appendLock(make([]byte, 0, 320), &r.Body)
	if !ok {
		return api.AcquireLock201JSONResponse(r).VisitAcquireLockResponse(w)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", r.Headers.Location)
	w.WriteHeader(http.StatusCreated)
	_, err := w.Write(b)
	return err
}

// appendLock appends l as json.Encoder writes it (members in the struct's
// order, then a newline), and reports whether it could: a string with a
// byte that encoding/json would escape is left to encoding/json.
func appendLock(b []byte, l *api.LockResponse) ([]byte, bool) {
	ok := true
	str := func(name, v string) {
		b = append(b, name...)
		b = append(b, '"')
		b = append(b, v...)
		b = append(b, '"')
		ok = ok && plainJSON(v)
	}
	num := func(name string, v int64) {
		b = append(b, name...)
		b = strconv.AppendInt(b, v, 10)
	}
	str(`{"expires_at":`, l.ExpiresAt)
	num(`,"fencing_token":`, l.FencingToken)
	num(`,"locked_nodes":`, int64(l.LockedNodes))
	num(`,"nodes":`, int64(l.Nodes))
	num(`,"quorum":`, int64(l.Quorum))
	str(`,"resource":`, l.Resource)
	str(`,"token":`, l.Token)
	num(`,"ttl_ms":`, l.TTLMs)
	num(`,"validity_ms":`, l.ValidityMs)
	b = append(b, '}', '\n')
	return b, ok
}

// plainJSON reports whether s is written as it is inside a JSON string by
// json.Encoder: printable ASCII but for the quote, the backslash and the
// characters it escapes for HTML (<, >, &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
