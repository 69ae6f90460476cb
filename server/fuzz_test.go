package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redlockd/redlockd/redlock"
)

// FuzzHandlers sends arbitrary requests to the handler: none may panic or
// get a 5xx, every response has an X-Request-Id, every error is a problem,
// and the Locker only ever sees valid arguments. headers holds
// "Name: value" lines.
func FuzzHandlers(f *testing.F) {
	for _, tc := range badRequests {
		f.Add(tc.req.method, tc.req.target, headerLines(tc.req.headers), tc.req.body)
	}
	f.Add("POST", "/locks/job", "Content-Type: application/json", `{"ttl_ms": 100, "wait_ms": 5, "token": "`+tokenA+`", "owner": "x"}`)
	f.Add("PATCH", "/locks/job:1", "Lock-Token: "+tokenA, `{"ttl_ms": 60000}`)
	f.Add("DELETE", "/locks/a.b-c_d", "Lock-Token: "+tokenB, "")
	f.Add("GET", "/locks/held", "", "")
	f.Add("GET", "/readyz", "", "")
	f.Add("GET", "/openapi.yaml", "", "")

	f.Fuzz(func(t *testing.T, method, path, headers, body string) {
		r, err := http.NewRequest(method, "http://redlockd.test"+path, strings.NewReader(body))
		if err != nil {
			t.Skip()
		}
		for line := range strings.Lines(headers) {
			if name, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				r.Header.Add(name, strings.TrimSpace(value))
			}
		}
		_, h := newHandler(validatingLocker(t), nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		if w.Code >= 500 {
			t.Errorf("%s %q: got %d %s", method, path, w.Code, w.Body)
		}
		if w.Header().Get("X-Request-Id") == "" {
			t.Errorf("%s %q: no X-Request-Id", method, path)
		}
		if ct := w.Header().Get("Content-Type"); w.Code >= 400 && ct != "application/problem+json" {
			t.Errorf("%s %q: got %d with Content-Type %q", method, path, w.Code, ct)
		}
	})
}

// validatingLocker returns a fake Locker that fails the test when called
// with arguments the server should have rejected. Its answers depend on the
// resource, to reach the error paths.
func validatingLocker(t *testing.T) *fakeLocker {
	checkName := func(namespace, resource string) {
		if namespace != "" || !redlock.ValidName(resource) {
			t.Errorf("invalid name %q/%q", namespace, resource)
		}
	}
	checkTTL := func(ttl time.Duration) {
		if ttl < redlock.MinTTL || ttl > defaultMaxTTL {
			t.Errorf("invalid TTL %v", ttl)
		}
	}
	checkToken := func(token string) {
		if !redlock.ValidToken(token) {
			t.Errorf("invalid token %q", token)
		}
	}
	errFor := func(resource string) error {
		switch len(resource) % 4 {
		case 1:
			return &redlock.HeldError{Remaining: time.Duration(len(resource)) * time.Second}
		case 2:
			return redlock.ErrLockExpired
		case 3:
			return redlock.ErrHeldByOther
		}
		return nil
	}
	return &fakeLocker{
		AcquireFn: func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
			checkName(o.Namespace, resource)
			checkTTL(o.TTL)
			if o.Wait < 0 || o.Wait > defaultMaxWait {
				t.Errorf("invalid wait %v", o.Wait)
			}
			if o.Token != "" {
				checkToken(o.Token)
			}
			if utf8.RuneCountInString(o.Owner) > redlock.MaxOwnerLen {
				t.Errorf("owner too long: %d", len(o.Owner))
			}
			if err := errFor(resource); err != nil {
				return redlock.Lock{}, err
			}
			return testLock(resource, tokenA, o.TTL), nil
		},
		ReleaseFn: func(_ context.Context, namespace, resource, token string) error {
			checkName(namespace, resource)
			checkToken(token)
			return errFor(resource)
		},
		ExtendFn: func(_ context.Context, namespace, resource, token string, ttl time.Duration) (redlock.Lock, error) {
			checkName(namespace, resource)
			checkToken(token)
			checkTTL(ttl)
			if err := errFor(resource); err != nil {
				return redlock.Lock{}, err
			}
			return testLock(resource, token, ttl), nil
		},
		InspectFn: func(_ context.Context, namespace, resource string) (redlock.Info, error) {
			checkName(namespace, resource)
			if len(resource)%2 == 0 {
				return redlock.Info{}, redlock.ErrNotHeld
			}
			return redlock.Info{Resource: resource, Fence: 1, Remaining: time.Second, HeldNodes: 3}, nil
		},
		StatusFn: func(context.Context) []redlock.NodeStatus {
			return []redlock.NodeStatus{{Addr: "a:1", Up: true}, {Addr: "b:1", Up: true}, {Addr: "c:1", Up: true}}
		},
	}
}

// headerLines formats name, value pairs as "Name: value" lines.
func headerLines(pairs []string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		b.WriteString(pairs[i] + ": " + pairs[i+1] + "\n")
	}
	return b.String()
}
