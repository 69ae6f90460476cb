package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// testPermit is the permit the fake returns.
func testPermit(name, token string, ttl time.Duration, limit, index int) redlock.Permit {
	return redlock.Permit{Lock: testLock(name, token, ttl), Limit: limit, Index: index}
}

func TestSemaphoreAcquirePermit(t *testing.T) {
	f := newFake(t)
	want := redlock.PermitOptions{Limit: 4, AcquireOptions: redlock.AcquireOptions{TTL: time.Second, Wait: 0, Token: tokenA, Owner: "w1"}}
	f.AcquirePermitFn = func(_ context.Context, name string, o redlock.PermitOptions) (redlock.Permit, error) {
		if name != "partner-api" || o != want {
			t.Errorf("AcquirePermit(%q, %+v), want %+v", name, o, want)
		}
		return testPermit(name, tokenA, o.TTL, o.Limit, 3), nil
	}
	_, h := newHandler(f, nil)
	w := serve(t, h, request{method: "POST", target: "/semaphores/partner-api",
		body: `{"limit": 4.0, "ttl_ms": 1000, "token": "` + tokenA + `", "owner": "w1"}`})
	got := decode[api.PermitResponse](t, w, http.StatusCreated)
	if got.Resource != "partner-api" || got.Limit != 4 || got.Permit != 3 || got.Token != tokenA || got.FencingToken != 42 || got.TTLMs != 1000 {
		t.Errorf("body: got %+v", got)
	}
	if exp, got := "/semaphores/partner-api", w.Header().Get("Location"); exp != got {
		t.Errorf("Location: got %q, want %q", got, exp)
	}
}

func TestSemaphoreAcquirePermitWaits(t *testing.T) {
	f := newFake(t)
	f.AcquirePermitFn = func(_ context.Context, _ string, o redlock.PermitOptions) (redlock.Permit, error) {
		if o.Wait != 2*time.Second || o.Limit != 2 {
			t.Errorf("options: got %+v", o)
		}
		return testPermit("s", tokenA, o.TTL, o.Limit, 0), nil
	}
	_, h := newHandler(f, nil)
	w := serve(t, h, request{method: "POST", target: "/semaphores/s", body: `{"limit": 2, "wait_ms": 2000}`})
	decode[api.PermitResponse](t, w, http.StatusCreated)
}

func TestSemaphoreAcquirePermitErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		err    error
		status int
		kind   string
		detail string
	}{
		"every permit held":  {&redlock.HeldError{Remaining: 2 * time.Second}, 409, "lock-held", "every permit"},
		"limit mismatch":     {&redlock.LimitError{Limit: 3}, 409, "limit-mismatch", "limit 3, not 4"},
		"quorum unavailable": {redlock.ErrQuorumUnavailable, 503, "quorum-unavailable", "try again"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.AcquirePermitFn = func(context.Context, string, redlock.PermitOptions) (redlock.Permit, error) {
				return redlock.Permit{}, tc.err
			}
			_, h := newHandler(f, nil)
			w := serve(t, h, request{method: "POST", target: "/semaphores/s", body: `{"limit": 4}`})
			p := checkProblem(t, w, tc.status, tc.kind)
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q, want it to contain %q", p.Detail, tc.detail)
			}
			if tc.kind == "limit-mismatch" {
				if p.Limit == nil || *p.Limit != 3 || p.RetryAfterMs != nil || w.Header().Get("Retry-After") != "" {
					t.Errorf("limit-mismatch: limit %v, retry_after_ms %v, Retry-After %q", p.Limit, p.RetryAfterMs, w.Header().Get("Retry-After"))
				}
			} else if p.Limit != nil {
				t.Errorf("limit %d in a %s problem", *p.Limit, tc.kind)
			}
			if tc.kind == "lock-held" && (w.Header().Get("Retry-After") == "" || p.RetryAfterMs == nil) {
				t.Errorf("lock-held without Retry-After or retry_after_ms")
			}
		})
	}
}

func TestSemaphoreBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		req    request
		detail string
	}{
		"no body":       {request{method: "POST", target: "/semaphores/s"}, "body is required"},
		"limit missing": {request{method: "POST", target: "/semaphores/s", body: `{"ttl_ms": 1000}`}, "limit: is required"},
		"limit 0":       {request{method: "POST", target: "/semaphores/s", body: `{"limit": 0}`}, "limit: number must be at least 1"},
		"limit -1":      {request{method: "POST", target: "/semaphores/s", body: `{"limit": -1}`}, "limit: number must be at least 1"},
		"limit 257":     {request{method: "POST", target: "/semaphores/s", body: `{"limit": 257}`}, "limit: number must be at most 256"},
		"limit huge":    {request{method: "POST", target: "/semaphores/s", body: `{"limit": 1e30}`}, "limit: number must be at most 256"},
		"limit 1.5":     {request{method: "POST", target: "/semaphores/s", body: `{"limit": 1.5}`}, "limit: value must be an integer"},
		`limit "4"`:     {request{method: "POST", target: "/semaphores/s", body: `{"limit": "4"}`}, "limit: value must be an integer"},
		"limit null":    {request{method: "POST", target: "/semaphores/s", body: `{"limit": null}`}, "limit: must not be null"},
		"unknown field": {request{method: "POST", target: "/semaphores/s", body: `{"limit": 2, "limits": 2}`}, `unknown member "limits"`},
		"bad ttl":       {request{method: "POST", target: "/semaphores/s", body: `{"limit": 2, "ttl_ms": 5}`}, "ttl_ms"},
		"bad token":     {request{method: "POST", target: "/semaphores/s", body: `{"limit": 2, "token": "short"}`}, "token"},
		"bad name":      {request{method: "POST", target: "/semaphores/a%2Fb", body: `{"limit": 2}`}, "name: must match"},
		"dot name":      {request{method: "GET", target: "/semaphores/.."}, "name: must match"},
		"form post": {request{method: "POST", target: "/semaphores/s", body: `{"limit": 2}`,
			headers: []string{"Content-Type", "application/x-www-form-urlencoded"}}, "Content-Type"},
		"extend no token":  {request{method: "PATCH", target: "/semaphores/s"}, "Lock-Token"},
		"extend bad ttl":   {request{method: "PATCH", target: "/semaphores/s", body: `{"ttl_ms": 1}`, headers: []string{"Lock-Token", tokenA}}, "ttl_ms"},
		"extend limit":     {request{method: "PATCH", target: "/semaphores/s", body: `{"limit": 2}`, headers: []string{"Lock-Token", tokenA}}, `unknown member "limit"`},
		"release no token": {request{method: "DELETE", target: "/semaphores/s"}, "Lock-Token"},
		"release bad token": {request{method: "DELETE", target: "/semaphores/s",
			headers: []string{"Lock-Token", "x"}}, "Lock-Token"},
	} {
		t.Run(name, func(t *testing.T) {
			_, h := newHandler(newFake(t), nil) // any Locker call fails the test
			p := checkProblem(t, serve(t, h, tc.req), http.StatusBadRequest, "invalid-request")
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q, want it to contain %q", p.Detail, tc.detail)
			}
		})
	}
}

func TestSemaphoreExtendRelease(t *testing.T) {
	f := newFake(t)
	f.ExtendPermitFn = func(_ context.Context, ns, name, token string, ttl time.Duration) (redlock.Permit, error) {
		if ns != "" || name != "s" || token != tokenA || ttl != 5*time.Second {
			t.Errorf("ExtendPermit(%q, %q, %q, %v)", ns, name, token, ttl)
		}
		return testPermit(name, token, ttl, 2, 1), nil
	}
	released := 0
	f.ReleasePermitFn = func(_ context.Context, _, name, token string) error {
		if released++; released > 1 {
			return redlock.ErrLockExpired
		}
		return nil
	}
	_, h := newHandler(f, nil)
	w := serve(t, h, request{method: "PATCH", target: "/semaphores/s", body: `{"ttl_ms": 5000}`, headers: []string{"Lock-Token", tokenA}})
	if got := decode[api.PermitResponse](t, w, http.StatusOK); got.Permit != 1 || got.Limit != 2 || got.TTLMs != 5000 {
		t.Errorf("extend: got %+v", got)
	}
	if w := serve(t, h, request{method: "DELETE", target: "/semaphores/s", headers: []string{"Lock-Token", tokenA}}); w.Code != http.StatusNoContent {
		t.Errorf("release: got %d %s", w.Code, w.Body)
	}
	w = serve(t, h, request{method: "DELETE", target: "/semaphores/s", headers: []string{"Lock-Token", tokenA}})
	if p := checkProblem(t, w, http.StatusConflict, "not-owner"); p.LockState == nil || *p.LockState != api.ProblemLockStateExpired {
		t.Errorf("release of a lost permit: %+v", p)
	}
	f.ExtendPermitFn = func(context.Context, string, string, string, time.Duration) (redlock.Permit, error) {
		return redlock.Permit{}, redlock.ErrLockExpired
	}
	checkProblem(t, serve(t, h, request{method: "PATCH", target: "/semaphores/s", headers: []string{"Lock-Token", tokenA}}), http.StatusConflict, "not-owner")
}

func TestSemaphoreInspect(t *testing.T) {
	f := newFake(t)
	f.InspectSemaphoreFn = func(_ context.Context, _, name string) (redlock.SemaphoreInfo, error) {
		if name == "free" {
			return redlock.SemaphoreInfo{Name: name}, nil
		}
		return redlock.SemaphoreInfo{Name: name, Limit: 3, Permits: []redlock.PermitInfo{
			{Index: 0, Owner: "a", Fence: 7, Remaining: 1500 * time.Millisecond, HeldNodes: 3},
			{Index: 2, Owner: "b", Fence: 9, Remaining: time.Second, HeldNodes: 5},
		}}, nil
	}
	_, h := newHandler(f, nil)
	w := serve(t, h, request{method: "GET", target: "/semaphores/s"})
	if strings.Contains(w.Body.String(), `"token"`) {
		t.Errorf("GET shows a token: %s", w.Body)
	}
	got := decode[api.SemaphoreInfo](t, w, http.StatusOK)
	if got.Name != "s" || got.Limit != 3 || got.Held != 2 || len(got.Permits) != 2 ||
		got.Permits[1] != (api.PermitInfo{Permit: 2, Owner: "b", FencingToken: 9, RemainingMs: 1000, HeldNodes: 5}) {
		t.Errorf("body: got %+v", got)
	}
	w = serve(t, h, request{method: "GET", target: "/semaphores/free"})
	if exp, got := `{"held":0,"limit":0,"name":"free","permits":[]}`, strings.TrimSpace(w.Body.String()); exp != got {
		t.Errorf("free semaphore: got %s, want %s", got, exp)
	}
	w = serve(t, h, request{method: "HEAD", target: "/semaphores/s"})
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("HEAD: got %d %q", w.Code, w.Header().Get("Content-Type"))
	}
}

func TestSemaphoreMethodNotAllowed(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	w := serve(t, h, request{method: "PUT", target: "/semaphores/s"})
	checkProblem(t, w, http.StatusMethodNotAllowed, "method-not-allowed")
	if exp, got := "GET, HEAD, POST, PATCH, DELETE", w.Header().Get("Allow"); exp != got {
		t.Errorf("Allow: got %q, want %q", got, exp)
	}
	checkProblem(t, serve(t, h, request{method: "GET", target: "/semaphores"}), http.StatusNotFound, "not-found")
}

func TestSemaphoreKeys(t *testing.T) {
	f := newFake(t)
	f.InspectSemaphoreFn = func(_ context.Context, ns, name string) (redlock.SemaphoreInfo, error) {
		if ns != "ns-b" {
			t.Errorf("namespace %q, want ns-b", ns)
		}
		return redlock.SemaphoreInfo{Name: name}, nil
	}
	h := New(Config{Locker: f, Keys: testKeys(t)}).Handler()
	for _, req := range []request{
		{method: "POST", target: "/semaphores/s", body: `{"limit": 2}`},
		{method: "GET", target: "/semaphores/s", headers: []string{"Authorization", "Bearer nope"}},
		{method: "DELETE", target: "/semaphores/s", headers: []string{"Lock-Token", tokenA}},
		{method: "PUT", target: "/semaphores/s"},
	} {
		w := serve(t, h, req)
		checkProblem(t, w, http.StatusUnauthorized, "unauthorized")
		if w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: no WWW-Authenticate", req.method, req.target)
		}
	}
	decode[api.SemaphoreInfo](t, serve(t, h, request{method: "GET", target: "/semaphores/s", headers: []string{"Authorization", "Bearer " + keyB}}), http.StatusOK)
}

func TestSemaphoreShuttingDown(t *testing.T) {
	s, h := newHandler(newFake(t), nil)
	s.BeginShutdown()
	checkProblem(t, serve(t, h, request{method: "POST", target: "/semaphores/s", body: `{"limit": 2}`}), http.StatusServiceUnavailable, "shutting-down")
}
