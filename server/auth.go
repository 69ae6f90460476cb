package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/redlockd/redlockd/redlock"
)

// An API keys file is JSON, {"keys":[{"name":"ci","namespace":"ci",
// "sha256":"<hex>"}]}: the SHA-256 of each key, never the key. The hash of a
// request's "Authorization: Bearer <key>" is compared with every entry in
// constant time, so the time taken says nothing about which entry matched.
// The key's namespace is the request's: the same name in two namespaces is
// two independent locks.

// Errors of authentication, mapped by problemFor to 401 unauthorized: no
// Authorization header, or one that is not "Bearer <key>" of a known key.
var (
	errNoKey  = errors.New("server: no API key")
	errBadKey = errors.New("server: unknown API key")
)

// APIKey is one entry of an API keys file.
type APIKey struct {
	Name      string `json:"name"`      // identifies the key in logs; not secret
	Namespace string `json:"namespace"` // the lock namespace the key reaches
	SHA256    string `json:"sha256"`    // the hex SHA-256 of the key
}

// Keys is a validated set of API keys. The zero value and nil hold no key.
// Replace swaps in another set atomically (a reload of the keys file): each
// request is checked against one whole set, the old or the new.
type Keys struct {
	entries atomic.Pointer[[]keyEntry]
}

type keyEntry struct {
	name, namespace string
	sum             [sha256.Size]byte
}

const maxKeysFileBytes = 1 << 20

// ParseKeys parses and validates an API keys file: a JSON object with one
// member "keys", a non-empty list of entries with exactly the members name,
// namespace (both valid names per redlock.ValidName) and sha256 (64 hex
// digits); names and hashes must be unique. The error lists every problem;
// it quotes no hash.
func ParseKeys(data []byte) (*Keys, error) {
	if len(data) > maxKeysFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxKeysFileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f struct {
		Keys []APIKey `json:"keys"`
	}
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf(`not a JSON object {"keys":[{"name":…,"namespace":…,"sha256":…}]}: %v`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON object")
	}
	if len(f.Keys) == 0 {
		return nil, errors.New(`no keys: "keys" must list at least one key (make one with 'redlockd keygen')`)
	}
	var (
		errs   []error
		names  = map[string]int{}
		hashes = map[[sha256.Size]byte]int{}
		set    = make([]keyEntry, 0, len(f.Keys))
	)
	for i, e := range f.Keys {
		n, name := i+1, truncate(e.Name, 64)
		if !redlock.ValidName(e.Name) {
			errs = append(errs, fmt.Errorf("key #%d: name %q must be 1-200 characters of [A-Za-z0-9._:-]", n, name))
		} else if j, dup := names[e.Name]; dup {
			errs = append(errs, fmt.Errorf("key #%d: name %q is already key #%d's", n, e.Name, j))
		} else {
			names[e.Name] = n
		}
		if !redlock.ValidName(e.Namespace) {
			errs = append(errs, fmt.Errorf("key #%d (%s): namespace %q must be 1-200 characters of [A-Za-z0-9._:-], other than \".\" and \"..\"", n, name, truncate(e.Namespace, 64)))
		}
		b, err := hex.DecodeString(e.SHA256)
		if err != nil || len(b) != sha256.Size {
			// Not quoted: it may be the key itself, pasted by mistake.
			errs = append(errs, fmt.Errorf("key #%d (%s): sha256 must be 64 hex digits, the SHA-256 of the key (not the key itself)", n, name))
			continue
		}
		sum := [sha256.Size]byte(b)
		if j, dup := hashes[sum]; dup {
			errs = append(errs, fmt.Errorf("key #%d (%s): same sha256 as key #%d: one key cannot have two names", n, name, j))
			continue
		}
		hashes[sum] = n
		set = append(set, keyEntry{name: e.Name, namespace: e.Namespace, sum: sum})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	k := &Keys{}
	k.entries.Store(&set)
	return k, nil
}

// HashKey returns the hex SHA-256 of key, as stored in an API keys file.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Len returns the number of keys.
func (k *Keys) Len() int { return len(k.set()) }

// set returns the current keys; nil for none.
func (k *Keys) set() []keyEntry {
	if k == nil {
		return nil
	}
	if p := k.entries.Load(); p != nil {
		return *p
	}
	return nil
}

// Replace puts the keys of from in place of k's, atomically: a request
// checked after it returns is checked against from's keys only. from must
// come from ParseKeys and is not changed.
func (k *Keys) Replace(from *Keys) {
	set := from.set()
	k.entries.Store(&set)
}

// lookup returns the entry whose hash is key's. It compares with every entry
// in constant time and does not stop at a match.
func (k *Keys) lookup(key string) (keyEntry, bool) {
	entries := k.set()
	sum := sha256.Sum256([]byte(key))
	found, idx := 0, 0
	for i := range entries {
		eq := subtle.ConstantTimeCompare(sum[:], entries[i].sum[:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
		found |= eq
	}
	if found == 0 {
		return keyEntry{}, false
	}
	return entries[idx], true
}

// namespaceFrom returns the lock namespace of the authenticated caller, or
// the default namespace "" when the server runs without API keys.
func namespaceFrom(ctx context.Context) string {
	if rq := reqInfoOf(ctx); rq != nil && rq.caller != nil {
		return rq.caller.namespace
	}
	return ""
}

// needsKey reports whether a request to path needs an API key: every /locks
// and /semaphores path, and /metrics with Config.MetricsAuth. Both the raw and the decoded
// path are checked, so that no spelling reaches a lock unauthenticated.
func (s *Server) needsKey(r *http.Request) bool {
	for _, p := range []string{r.URL.Path, r.URL.RawPath} {
		if p == "/locks" || strings.HasPrefix(p, "/locks/") || strings.HasPrefix(p, "/semaphores/") || (s.cfg.MetricsAuth && p == "/metrics") {
			return true
		}
	}
	return false
}

// authenticate checks the "Authorization: Bearer <key>" of requests that
// need one (see needsKey) when the server has keys, and records the key as
// the request's caller (its name in the request's logger). It runs before
// routing, body limits and decoding, so an unauthenticated client learns
// nothing about locks or request syntax. A request that needs no key is
// served without one, and its caller recorded if its key is valid (for
// /readyz's node list).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Keys.Len() == 0 {
			next.ServeHTTP(w, r)
			return
		}
		c, err := s.caller(r)
		if err != nil && s.needsKey(r) {
			s.writeProblem(w, r, err)
			return
		}
		if err == nil {
			reqInfoOf(r.Context()).caller = &c // logged as key (logEvent)
		}
		next.ServeHTTP(w, r)
	})
}

// caller returns the key of r's one "Authorization: Bearer <key>" header,
// or errNoKey or errBadKey.
func (s *Server) caller(r *http.Request) (keyEntry, error) {
	hdr := r.Header.Values("Authorization")
	if len(hdr) == 0 {
		return keyEntry{}, errNoKey
	}
	scheme, key, _ := strings.Cut(hdr[0], " ")
	key = strings.TrimSpace(key)
	c, ok := s.cfg.Keys.lookup(key)
	if len(hdr) != 1 || !strings.EqualFold(scheme, "Bearer") || key == "" || !ok {
		return keyEntry{}, errBadKey
	}
	return c, nil
}

// authenticated reports whether the request of ctx may see what only a
// key's holder may: always without keys, else with a valid key.
func (s *Server) authenticated(ctx context.Context) bool {
	rq := reqInfoOf(ctx)
	return s.cfg.Keys.Len() == 0 || rq != nil && rq.caller != nil
}
