package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlockd/redlockd/client"
)

func newClient(t *testing.T, url string, o client.Options) *client.Client {
	t.Helper()
	c, err := client.New(url, o)
	if err != nil {
		t.Fatalf("client.New(%q): %v", url, err)
	}
	return c
}

var seq atomic.Int64

// resourceName returns a resource name unique to this test.
func resourceName(t *testing.T) string {
	return fmt.Sprintf("%s.%d", strings.NewReplacer("/", "-", "#", "-").Replace(t.Name()), seq.Add(1))
}

// validToken reports whether s is a valid token: 22-128 characters of
// [A-Za-z0-9_-] (openapi.yaml).
func validToken(s string) bool {
	return len(s) >= 22 && len(s) <= 128 && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == ""
}

// clientToken returns a fresh client-chosen token.
func clientToken() string { return fmt.Sprintf("client_token_%015d", seq.Add(1)) }

// wantProblem asserts that err is a *ProblemError with status and kind, and
// returns it.
func wantProblem(t *testing.T, err error, status int, kind string) *client.ProblemError {
	t.Helper()
	var pe *client.ProblemError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *client.ProblemError", err, err)
	}
	if pe.Status != status || pe.Kind() != kind {
		t.Fatalf("problem %d %q, want %d %q: %v", pe.Status, pe.Kind(), status, kind, err)
	}
	if kind != "" && pe.Type != "urn:redlockd:problem:"+kind {
		t.Errorf("problem type %q, want urn:redlockd:problem:%s", pe.Type, kind)
	}
	return pe
}

func wantIs(t *testing.T, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("error %v: errors.Is(%v) is false", err, target)
		}
	}
}

// TestLifecycle takes, inspects, extends and releases a lock and checks
// every field the typed API returns.
func TestLifecycle(t *testing.T) {
	g := startGateway(t, 5, nil)
	c := newClient(t, g.URL, client.Options{})
	ctx := context.Background()
	res := resourceName(t)

	before := time.Now()
	l, err := c.Acquire(ctx, res, client.AcquireOptions{TTL: 20 * time.Second, Owner: "test@host"})
	after := time.Now()
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if l.Resource != res || !validToken(l.Token) || l.Fence < 1 || l.TTL != 20*time.Second {
		t.Errorf("Acquire: resource %q fence %d ttl %v, token valid %v", l.Resource, l.Fence, l.TTL, validToken(l.Token))
	}
	if l.Validity <= 15*time.Second || l.Validity > 20*time.Second {
		t.Errorf("validity %v, want within (15s, 20s] (5s for a starved process)", l.Validity)
	}
	if l.Start.Before(before) || l.Start.After(after) || !l.Until.Equal(l.Start.Add(l.Validity)) {
		t.Errorf("Start %v not within the call or Until %v != Start+Validity", l.Start, l.Until)
	}
	if l.ExpiresAt.IsZero() || l.Nodes != 5 || l.Quorum != 3 || l.Locked < 3 || l.Locked > 5 {
		t.Errorf("ExpiresAt %v nodes %d quorum %d locked %d, want set/5/3/3..5", l.ExpiresAt, l.Nodes, l.Quorum, l.Locked)
	}

	info, err := c.Inspect(ctx, res)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if info.Resource != res || !info.Held || info.Owner != "test@host" || info.Fence != l.Fence || info.HeldNodes < 3 ||
		info.Remaining <= 0 || info.Remaining > 20*time.Second {
		t.Errorf("Inspect = %+v, want held, owner test@host, fence %d, at least 3 nodes, remaining in (0, 20s]", info, l.Fence)
	}

	e, err := c.Extend(ctx, res, l.Token, 45*time.Second)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if e.Token != l.Token || e.Fence != l.Fence || e.TTL != 45*time.Second || !e.Until.After(l.Until) {
		t.Errorf("Extend: same token %v, fence %d (want %d), ttl %v, until later %v",
			e.Token == l.Token, e.Fence, l.Fence, e.TTL, e.Until.After(l.Until))
	}
	if e, err := c.Extend(ctx, res, l.Token, 0); err != nil || e.TTL != 30*time.Second {
		t.Errorf("Extend with the default TTL: %v, ttl %v; want the gateway's 30s", err, e.TTL)
	}

	if err := c.Release(ctx, res, l.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if info, err := c.Inspect(ctx, res); err != nil || info != (client.Info{Resource: res}) {
		t.Errorf("Inspect after Release = %+v, %v; want a free lock (Held false) and no error", info, err)
	}

	l2, err := c.Acquire(ctx, res, client.AcquireOptions{})
	if err != nil {
		t.Fatalf("Acquire again: %v", err)
	}
	if l2.Fence <= l.Fence || l2.TTL != 30*time.Second {
		t.Errorf("second fence %d, want > %d; ttl %v, want the gateway's default 30s", l2.Fence, l.Fence, l2.TTL)
	}
	if err := c.Release(ctx, res, l2.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestReaders: readers share a lock and get the last writer's fence; Inspect
// tells the mode and how many readers hold it, List the mode; a writer is
// refused until they leave.
func TestReaders(t *testing.T) {
	g := startGateway(t, 3, nil)
	c := newClient(t, g.URL, client.Options{})
	ctx := context.Background()
	res := resourceName(t)

	w, err := c.Acquire(ctx, res, client.AcquireOptions{})
	if err != nil || w.Mode != client.ModeWrite {
		t.Fatalf("writer: %+v, %v", w, err)
	}
	if err := c.Release(ctx, res, w.Token); err != nil {
		t.Fatal(err)
	}
	var readers []client.Lock
	for range 2 {
		r, err := c.Acquire(ctx, res, client.AcquireOptions{Mode: client.ModeRead, Owner: "reader"})
		if err != nil || r.Mode != client.ModeRead || r.Fence != w.Fence {
			t.Fatalf("reader: %+v, %v; want mode read, the writer's fence %d", r, err, w.Fence)
		}
		readers = append(readers, r)
	}
	if info, err := c.Inspect(ctx, res); err != nil || info.Mode != client.ModeRead || info.Readers != 2 || info.Owner != "reader" || info.Fence != w.Fence {
		t.Errorf("Inspect = %+v, %v; want mode read, 2 readers", info, err)
	}
	if _, err := c.Acquire(ctx, res, client.AcquireOptions{Mode: client.ModeWrite}); !errors.Is(err, client.ErrLockHeld) {
		t.Errorf("writer while readers hold: %v, want ErrLockHeld", err)
	}
	if e, err := c.Extend(ctx, res, readers[0].Token, 0); err != nil || e.Mode != client.ModeRead || e.Fence != w.Fence {
		t.Errorf("reader's Extend: %+v, %v", e, err)
	}
	for _, r := range readers {
		if err := c.Release(ctx, res, r.Token); err != nil {
			t.Fatal(err)
		}
	}
	w2, err := c.Acquire(ctx, res, client.AcquireOptions{Mode: client.ModeWrite})
	if err != nil || w2.Fence <= w.Fence {
		t.Fatalf("writer after the readers: %+v, %v; want a fence above %d", w2, err, w.Fence)
	}
	if info, err := c.Inspect(ctx, res); err != nil || info.Mode != client.ModeWrite || info.Readers != 0 {
		t.Errorf("Inspect = %+v, %v; want mode write", info, err)
	}
	// List finds a writer's lock key (redlock.List scans those only).
	page, err := c.List(ctx, client.ListOptions{Prefix: res})
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Mode != client.ModeWrite {
		t.Errorf("List = %+v, %v; want the lock with mode write", page, err)
	}
}

// TestErrors checks every mapping from a gateway answer to the library's
// errors, against a real gateway wherever one can produce the answer.
func TestErrors(t *testing.T) {
	g := startGateway(t, 5, nil)
	c := newClient(t, g.URL, client.Options{})
	ctx := context.Background()

	t.Run("LockHeld", func(t *testing.T) {
		res := resourceName(t)
		l, err := c.Acquire(ctx, res, client.AcquireOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release(ctx, res, l.Token)
		_, err = c.Acquire(ctx, res, client.AcquireOptions{})
		wantIs(t, err, client.ErrLockHeld)
		var held *client.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("%v: not a *client.HeldError", err)
		}
		if held.Remaining < 25*time.Second || held.Remaining > 34*time.Second {
			t.Errorf("HeldError.Remaining = %v, want about the holder's 30s TTL (25s to 34s: a starved process, the gateway's jitter)", held.Remaining)
		}
		pe := wantProblem(t, err, http.StatusConflict, "lock-held")
		if pe.RetryAfter != held.Remaining || pe.RequestID == "" || pe.Detail == "" {
			t.Errorf("problem %+v: want RetryAfter = Remaining, a request id and a detail", pe)
		}
		if strings.Contains(err.Error(), l.Token) {
			t.Errorf("error reveals the token: %v", err)
		}
	})

	t.Run("NotOwner", func(t *testing.T) {
		res := resourceName(t)
		l, err := c.Acquire(ctx, res, client.AcquireOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		other := clientToken()
		err = c.Release(ctx, res, other)
		wantIs(t, err, client.ErrHeldByOther, client.ErrNotOwner)
		if pe := wantProblem(t, err, http.StatusConflict, "not-owner"); pe.LockState != "held-by-other" {
			t.Errorf("lock state %q, want held-by-other", pe.LockState)
		}
		_, err = c.Extend(ctx, res, other, time.Second)
		wantIs(t, err, client.ErrHeldByOther)

		if err := c.Release(ctx, res, l.Token); err != nil {
			t.Fatal(err)
		}
		// A retried release succeeds again (idempotent); a token that
		// never held the lock is told the lock is free.
		if err := c.Release(ctx, res, l.Token); err != nil {
			t.Fatalf("retried release: %v", err)
		}
		err = c.Release(ctx, res, other)
		wantIs(t, err, client.ErrLockExpired, client.ErrNotOwner)
		if errors.Is(err, client.ErrHeldByOther) {
			t.Errorf("%v: is ErrHeldByOther too", err)
		}
		if pe := wantProblem(t, err, http.StatusConflict, "not-owner"); pe.LockState != "expired" {
			t.Errorf("lock state %q, want expired", pe.LockState)
		}
		_, err = c.Extend(ctx, res, l.Token, time.Second)
		wantIs(t, err, client.ErrLockExpired)
	})

	t.Run("Invalid", func(t *testing.T) {
		res := resourceName(t)
		// The gateway refuses these (its limits are its own).
		for name, o := range map[string]client.AcquireOptions{
			"TTLTooShort":  {TTL: 50 * time.Millisecond},
			"TTLTooLong":   {TTL: time.Hour},
			"WaitTooLong":  {Wait: time.Hour, TTL: time.Second},
			"OwnerTooLong": {Owner: strings.Repeat("x", 300)},
		} {
			_, err := c.Acquire(ctx, res, o)
			wantIs(t, err, client.ErrInvalid)
			if pe := wantProblem(t, err, http.StatusBadRequest, "invalid-request"); pe.Detail == "" {
				t.Errorf("%s: problem without detail", name)
			}
		}
		_, err := c.Extend(ctx, res, clientToken(), 50*time.Millisecond)
		wantIs(t, err, client.ErrInvalid)
		wantProblem(t, err, http.StatusBadRequest, "invalid-request")

		// The client refuses these itself: they cannot make a valid request.
		var pe *client.ProblemError
		for name, err := range map[string]error{
			"Resource":      func() error { _, err := c.Acquire(ctx, "a/b", client.AcquireOptions{}); return err }(),
			"EmptyResource": func() error { _, err := c.Inspect(ctx, ""); return err }(),
			"Token":         func() error { _, err := c.Acquire(ctx, res, client.AcquireOptions{Token: "short"}); return err }(),
			"NegativeTTL":   func() error { _, err := c.Acquire(ctx, res, client.AcquireOptions{TTL: -time.Second}); return err }(),
			"NegativeWait":  func() error { _, err := c.Acquire(ctx, res, client.AcquireOptions{Wait: -1}); return err }(),
			"ReleaseToken":  c.Release(ctx, res, "bad token"),
			"ExtendToken":   func() error { _, err := c.Extend(ctx, res, "", time.Second); return err }(),
			"Mode":          func() error { _, err := c.Acquire(ctx, res, client.AcquireOptions{Mode: "READ"}); return err }(),
		} {
			if !errors.Is(err, client.ErrInvalid) || errors.As(err, &pe) {
				t.Errorf("%s: %v, want client.ErrInvalid without a request", name, err)
			}
		}
	})

	t.Run("Free", func(t *testing.T) {
		res := resourceName(t)
		if info, err := c.Inspect(ctx, res); err != nil || info != (client.Info{Resource: res}) {
			t.Errorf("Inspect of a free lock = %+v, %v; want Held false and no error", info, err)
		}
	})

	t.Run("IdempotentAcquire", func(t *testing.T) {
		res, token := resourceName(t), clientToken()
		l1, err := c.Acquire(ctx, res, client.AcquireOptions{Token: token, TTL: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l2, err := c.Acquire(ctx, res, client.AcquireOptions{Token: token, TTL: 30 * time.Second})
		if err != nil {
			t.Fatalf("retried acquire with the same token: %v", err)
		}
		if l1.Token != token || l2.Token != token || l2.Fence != l1.Fence || l2.TTL != 30*time.Second {
			t.Errorf("retry: fence %d then %d (want equal), ttl %v", l1.Fence, l2.Fence, l2.TTL)
		}
		if err := c.Release(ctx, res, token); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Wait", func(t *testing.T) {
		res := resourceName(t)
		l, err := c.Acquire(ctx, res, client.AcquireOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l2, err := c.Acquire(ctx, res, client.AcquireOptions{Wait: 20 * time.Second})
			if err == nil && l2.Fence <= l.Fence {
				err = fmt.Errorf("fence %d, want > %d", l2.Fence, l.Fence)
			}
			if err == nil {
				err = c.Release(ctx, res, l2.Token)
			}
			got <- err
		}()
		if err := c.Release(ctx, res, l.Token); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiting acquire: %v", err)
		}
	})
}

// TestQuorumUnavailable kills 3 of 5 nodes: the answer is unknown (503).
func TestQuorumUnavailable(t *testing.T) {
	g := startGateway(t, 5, nil)
	c := newClient(t, g.URL, client.Options{})
	ctx := context.Background()
	res := resourceName(t)
	l, err := c.Acquire(ctx, res, client.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes[:3] {
		n.Kill()
	}
	_, err = c.Acquire(ctx, resourceName(t), client.AcquireOptions{})
	wantIs(t, err, client.ErrQuorumUnavailable)
	if pe := wantProblem(t, err, http.StatusServiceUnavailable, "quorum-unavailable"); pe.RetryAfter <= 0 {
		t.Errorf("503 without a retry hint: %+v", pe)
	}
	_, err = c.Extend(ctx, res, l.Token, 10*time.Second)
	wantIs(t, err, client.ErrQuorumUnavailable)
	err = c.Release(ctx, res, l.Token)
	wantIs(t, err, client.ErrQuorumUnavailable)
	_, err = c.Inspect(ctx, res)
	wantIs(t, err, client.ErrQuorumUnavailable)
}

// TestShuttingDown: a gateway shutting down answers 503 shutting-down (as
// openapi.yaml says; canned here), which is ErrQuorumUnavailable too (the
// outcome is "try again").
func TestShuttingDown(t *testing.T) {
	g := startGateway(t, 3, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"type":"urn:redlockd:problem:shutting-down","title":"Shutting down","status":503,"detail":"the gateway is shutting down"}`)
		})
	})
	c := newClient(t, g.URL, client.Options{})
	_, err := c.Acquire(context.Background(), resourceName(t), client.AcquireOptions{})
	wantIs(t, err, client.ErrQuorumUnavailable)
	wantProblem(t, err, http.StatusServiceUnavailable, "shutting-down")
}

// TestTooManyWaiters: a gateway whose waiting slots are all taken answers 503
// too-many-waiters with Retry-After, which is ErrQuorumUnavailable too: try
// again after the hint, as the JS and Python clients do with every 503.
func TestTooManyWaiters(t *testing.T) {
	g := startGateway(t, 3, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"type":"urn:redlockd:problem:too-many-waiters","title":"Too many waiters","status":503,"detail":"too many acquires are waiting"}`)
		})
	})
	c := newClient(t, g.URL, client.Options{})
	_, err := c.Acquire(context.Background(), resourceName(t), client.AcquireOptions{Wait: time.Second})
	wantIs(t, err, client.ErrQuorumUnavailable)
	if pe := wantProblem(t, err, http.StatusServiceUnavailable, "too-many-waiters"); pe.RetryAfter != 2*time.Second {
		t.Errorf("RetryAfter %v, want 2s", pe.RetryAfter)
	}
}

// TestAPIKey checks that the key travels as a bearer token and that 401 is
// ErrUnauthorized. The gateway in front of the real one answers 401 as the
// contract says (problem+json, type unauthorized) when the key is wrong.
func TestAPIKey(t *testing.T) {
	const key = "rlk_test_key_0123456789"
	g := startGateway(t, 3, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+key {
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("X-Request-Id", "req-401")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"type":"urn:redlockd:problem:unauthorized","title":"Unauthorized","status":401,"detail":"missing or unknown API key"}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	res := resourceName(t)

	for name, k := range map[string]string{"NoKey": "", "WrongKey": "rlk_wrong"} {
		c := newClient(t, g.URL, client.Options{APIKey: k})
		_, err := c.Acquire(ctx, res, client.AcquireOptions{})
		wantIs(t, err, client.ErrUnauthorized)
		if pe := wantProblem(t, err, http.StatusUnauthorized, "unauthorized"); pe.RequestID != "req-401" {
			t.Errorf("%s: request id %q, want req-401", name, pe.RequestID)
		}
		if strings.Contains(err.Error(), key) {
			t.Errorf("%s: error reveals the key: %v", name, err)
		}
	}

	c := newClient(t, g.URL, client.Options{APIKey: key})
	l, err := c.Acquire(ctx, res, client.AcquireOptions{})
	if err != nil {
		t.Fatalf("with the key: %v", err)
	}
	if _, err := c.Extend(ctx, res, l.Token, 30*time.Second); err != nil {
		t.Fatalf("Extend with the key: %v", err)
	}
	if _, err := c.Inspect(ctx, res); err != nil {
		t.Fatalf("Inspect with the key: %v", err)
	}
	if err := c.Release(ctx, res, l.Token); err != nil {
		t.Fatalf("Release with the key: %v", err)
	}
}

// TestPathPrefix: a gateway behind a reverse proxy under /redlockd/.
func TestPathPrefix(t *testing.T) {
	g := startGateway(t, 3, func(next http.Handler) http.Handler {
		return http.StripPrefix("/redlockd", next)
	})
	for _, base := range []string{g.URL + "/redlockd", g.URL + "/redlockd/"} {
		c := newClient(t, base, client.Options{})
		res := resourceName(t)
		l, err := c.Acquire(context.Background(), res, client.AcquireOptions{})
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		if err := c.Release(context.Background(), res, l.Token); err != nil {
			t.Fatalf("%s: %v", base, err)
		}
	}
	// Without the prefix, or with a wrong one that reaches the gateway, the
	// path is unknown: ErrNotFound, never a lock that is free.
	for base, kind := range map[string]string{
		g.URL:                  "",          // the proxy's 404
		g.URL + "/redlockd/v1": "not-found", // the gateway's 404
	} {
		c := newClient(t, base, client.Options{})
		info, err := c.Inspect(context.Background(), resourceName(t))
		wantNotFound(t, err, kind)
		if info.Held || info.Resource != "" {
			t.Errorf("%s: Inspect returned %+v with its error", base, info)
		}
		_, err = c.Acquire(context.Background(), resourceName(t), client.AcquireOptions{})
		wantNotFound(t, err, kind)
		wantNotFound(t, c.Release(context.Background(), resourceName(t), clientToken()), kind)
		_, err = c.Extend(context.Background(), resourceName(t), clientToken(), time.Second)
		wantNotFound(t, err, kind)
	}
}

// wantNotFound asserts that err is a 404 of problem kind ("" if the body
// was not a problem) as client.ErrNotFound, and no lock outcome.
func wantNotFound(t *testing.T, err error, kind string) {
	t.Helper()
	wantIs(t, err, client.ErrNotFound)
	pe := wantProblem(t, err, http.StatusNotFound, kind)
	if kind != "" && (pe.Detail == "" || pe.RequestID == "") {
		t.Errorf("404 without the gateway's detail or request id: %+v", pe)
	}
	for _, lockErr := range []error{client.ErrNotOwner, client.ErrLockHeld, client.ErrQuorumUnavailable, client.ErrUnexpected} {
		if errors.Is(err, lockErr) {
			t.Errorf("%v: errors.Is(%v)", err, lockErr)
		}
	}
}

// TestTransport covers answers that do not come from a gateway.
func TestTransport(t *testing.T) {
	ctx := context.Background()

	t.Run("ConnectionRefused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + l.Addr().String()
		l.Close()
		c := newClient(t, url, client.Options{})
		_, err = c.Acquire(ctx, "r", client.AcquireOptions{})
		wantIs(t, err, client.ErrUnreachable)
		var pe *client.ProblemError
		if errors.As(err, &pe) {
			t.Errorf("transport error is a ProblemError: %v", err)
		}
	})

	t.Run("Deadline", func(t *testing.T) {
		hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}))
		defer hang.Close()
		c := newClient(t, hang.URL, client.Options{})
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err := c.Release(ctx, "r", clientToken())
		wantIs(t, err, client.ErrUnreachable, context.DeadlineExceeded)

		// Without a deadline in ctx, Options.Timeout bounds the call.
		c = newClient(t, hang.URL, client.Options{Timeout: 200 * time.Millisecond})
		start := time.Now()
		_, err = c.Inspect(context.Background(), "r")
		wantIs(t, err, client.ErrUnreachable, context.DeadlineExceeded)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("Inspect took %v with a 200ms timeout", d)
		}
	})

	for name, tc := range map[string]struct {
		status      int
		contentType string
		body        string
		want        error
	}{
		"ProxyBadGateway": {http.StatusBadGateway, "text/html", "<html>bad gateway</html>", client.ErrUnreachable},
		"ProxyTimeout":    {http.StatusGatewayTimeout, "text/plain", "timeout", client.ErrUnreachable},
		"Internal": {http.StatusInternalServerError, "application/problem+json",
			`{"type":"urn:redlockd:problem:internal","title":"Internal error","status":500,"detail":"internal error"}`, client.ErrUnexpected},
		"NotRedlockd":   {http.StatusOK, "text/html", "<html>hello</html>", client.ErrUnexpected},
		"ProxyNotFound": {http.StatusNotFound, "text/html", "<html>not found</html>", client.ErrNotFound},
		"MalformedJSON": {http.StatusCreated, "application/json", `{"token":`, client.ErrUnexpected},
		"UnknownProblem": {http.StatusConflict, "application/problem+json",
			`{"type":"about:blank","title":"Conflict","status":409,"detail":"?"}`, client.ErrUnexpected},
	} {
		t.Run(name, func(t *testing.T) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}))
			defer hs.Close()
			c := newClient(t, hs.URL, client.Options{})
			_, err := c.Acquire(ctx, "r", client.AcquireOptions{})
			wantIs(t, err, tc.want)
			if errors.Is(err, client.ErrLockHeld) || errors.Is(err, client.ErrNotOwner) || errors.Is(err, client.ErrQuorumUnavailable) {
				t.Errorf("%v maps to a lock outcome", err)
			}
			// Not a lock that is free either.
			info, err := c.Inspect(ctx, "r")
			wantIs(t, err, tc.want)
			if err == nil || info.Held {
				t.Errorf("Inspect: %+v, %v", info, err)
			}
		})
	}
}

func TestNew(t *testing.T) {
	for _, url := range []string{"", "localhost:8080", "ftp://host", "http://", "http://u:p@host", "http://host?x=1", "http://host/%zz"} {
		if _, err := client.New(url, client.Options{}); err == nil {
			t.Errorf("New(%q): no error", url)
		} else if strings.Contains(err.Error(), ":p@") {
			t.Errorf("New(%q): error reveals the password: %v", url, err)
		}
	}
	if _, err := client.New("http://host", client.Options{Timeout: -1}); err == nil {
		t.Error("New with a negative timeout: no error")
	}
	// A key that a header cannot hold (e.g. read from a file with its newline
	// inside) is refused here, not sent and reported as an unreachable gateway.
	for _, key := range []string{"SECRET\nkey", "SECRET\x00", "SECRET\x7f"} {
		if _, err := client.New("http://host", client.Options{APIKey: key}); err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("New with API key %q: %v, want an error that does not quote it", key, err)
		}
	}
	for _, url := range []string{"http://127.0.0.1:8080", "https://locks.example.com/prefix/"} {
		if _, err := client.New(url, client.Options{}); err != nil {
			t.Errorf("New(%q): %v", url, err)
		}
	}
}
