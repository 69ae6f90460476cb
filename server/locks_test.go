package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

func TestAcquire(t *testing.T) {
	for name, tc := range map[string]struct {
		target, body, contentType string
		want                      redlock.AcquireOptions
	}{
		"no body":         {target: "/locks/job-1", want: redlock.AcquireOptions{TTL: 30 * time.Second}},
		"empty object":    {target: "/locks/job-1", body: "{}", contentType: "application/json", want: redlock.AcquireOptions{TTL: 30 * time.Second}},
		"integral float":  {target: "/locks/job-1", body: `{"ttl_ms":5000.0,"wait_ms":0e0}`, want: redlock.AcquireOptions{TTL: 5 * time.Second}},
		"charset":         {target: "/locks/job-1", body: "{}", contentType: "application/json; charset=utf-8", want: redlock.AcquireOptions{TTL: 30 * time.Second}},
		"percent-encoded": {target: "/locks/job%2D1", want: redlock.AcquireOptions{TTL: 30 * time.Second}},
		"every field": {
			target: "/locks/job-1",
			body:   `{"ttl_ms": 100, "wait_ms": 60000, "token": "` + tokenA + `", "owner": "hôst/42", "mode": "write"}`,
			want:   redlock.AcquireOptions{TTL: 100 * time.Millisecond, Wait: time.Minute, Token: tokenA, Owner: "hôst/42", Mode: redlock.ModeWrite},
		},
		"reader": {target: "/locks/job-1", body: `{"mode": "read"}`, want: redlock.AcquireOptions{TTL: 30 * time.Second, Mode: redlock.ModeRead}},
		"limits": {
			target: "/locks/job-1", body: `{"ttl_ms": 60000, "wait_ms": 0, "owner": "` + strings.Repeat("é", 256) + `"}`,
			want: redlock.AcquireOptions{TTL: time.Minute, Owner: strings.Repeat("é", 256)},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			calls := 0
			f.AcquireFn = func(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
				calls++
				if resource != "job-1" {
					t.Errorf("resource: got %q", resource)
				}
				if o != tc.want {
					t.Errorf("options: got %+v, want %+v", o, tc.want)
				}
				l := testLock(resource, tokenB, o.TTL)
				l.Mode = cmp.Or(o.Mode, redlock.ModeWrite)
				return l, nil
			}
			_, h := newHandler(f, nil)
			var headers []string
			if tc.contentType != "" {
				headers = []string{"Content-Type", tc.contentType}
			}
			w := serve(t, h, request{method: "POST", target: tc.target, body: tc.body, headers: headers})
			got := decode[api.LockResponse](t, w, http.StatusCreated)
			if calls != 1 {
				t.Errorf("Acquire calls: got %d, want 1", calls)
			}
			if exp, got := "/locks/job-1", w.Header().Get("Location"); exp != got {
				t.Errorf("Location: got %q, want %q", got, exp)
			}
			if got.Resource != "job-1" || got.Token != tokenB || got.FencingToken != 42 || got.TTLMs != tc.want.TTL.Milliseconds() ||
				got.ValidityMs != tc.want.TTL.Milliseconds()-5 || got.Nodes != 5 || got.Quorum != 3 || got.LockedNodes != 4 ||
				got.Mode == nil || redlock.Mode(*got.Mode) != cmp.Or(tc.want.Mode, redlock.ModeWrite) {
				t.Errorf("body: got %+v", got)
			}
			at, err := time.Parse(time.RFC3339, got.ExpiresAt)
			if err != nil || !strings.HasSuffix(got.ExpiresAt, "Z") || len(got.ExpiresAt) != len("2006-01-02T15:04:05.000Z") {
				t.Errorf("expires_at: got %q (%v)", got.ExpiresAt, err)
			}
			if d := time.Until(at) - tc.want.TTL; d > time.Second || d < -time.Second {
				t.Errorf("expires_at: %v from now, want about %v", time.Until(at), tc.want.TTL)
			}
		})
	}
}

func TestAcquireErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		err            error
		status         int
		kind           string
		minMs, maxMs   int64 // retry_after_ms bounds, 0 if none
		retryAfter     []string
		detailContains string
	}{
		"held": {
			err: &redlock.HeldError{Remaining: 2500 * time.Millisecond}, status: 409, kind: "lock-held",
			minMs: 2500, maxMs: 2850, retryAfter: []string{"3"},
		},
		"held, joined": {
			err:    errors.Join(&redlock.HeldError{Remaining: 10 * time.Second}, context.DeadlineExceeded),
			status: 409, kind: "lock-held", minMs: 10000, maxMs: 11100, retryAfter: []string{"10", "11", "12"},
		},
		"held, remaining unknown": {
			err: &redlock.HeldError{}, status: 409, kind: "lock-held", minMs: 1000, maxMs: 1200, retryAfter: []string{"1", "2"},
		},
		"held, remaining above max TTL": {
			err: &redlock.HeldError{Remaining: time.Hour}, status: 409, kind: "lock-held", minMs: 60000, maxMs: 66100,
			retryAfter: []string{"60", "61", "62", "63", "64", "65", "66", "67"},
		},
		"quorum unavailable": {
			err:    errors.Join(redlock.ErrQuorumUnavailable, &redlock.NodeError{Node: 1, Addr: "10.0.0.1:6379", Err: errors.New("i/o timeout")}),
			status: 503, kind: "quorum-unavailable", minMs: 1000, maxMs: 1200, retryAfter: []string{"1", "2"},
		},
		"invalid": {
			err:    fmt.Errorf("%w: ttl 1h above max TTL 1m0s", redlock.ErrInvalid),
			status: 400, kind: "invalid-request", detailContains: "ttl 1h above max TTL",
		},
		"unexpected": {err: errors.New("secret internals " + tokenA), status: 500, kind: "internal", detailContains: "internal error"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.AcquireFn = func(context.Context, string, redlock.AcquireOptions) (redlock.Lock, error) {
				return redlock.Lock{}, tc.err
			}
			log := &syncBuffer{}
			_, h := newHandler(f, log)
			w := serve(t, h, request{method: "POST", target: "/locks/job"})
			body := w.Body.String()
			p := checkProblem(t, w, tc.status, tc.kind)
			if strings.Contains(body, tokenA) || strings.Contains(body, "10.0.0.1") {
				t.Errorf("body leaks internals: %s", body)
			}
			if !strings.Contains(p.Detail, tc.detailContains) {
				t.Errorf("detail: got %q, want it to contain %q", p.Detail, tc.detailContains)
			}
			ra := w.Header().Get("Retry-After")
			if tc.minMs == 0 {
				if ra != "" || p.RetryAfterMs != nil {
					t.Errorf("retry hints: got Retry-After %q, retry_after_ms %v", ra, p.RetryAfterMs)
				}
				return
			}
			if p.RetryAfterMs == nil || *p.RetryAfterMs < tc.minMs || *p.RetryAfterMs > tc.maxMs {
				t.Errorf("retry_after_ms: got %v, want within [%d, %d]", p.RetryAfterMs, tc.minMs, tc.maxMs)
			} else if exp := strconv.FormatInt((*p.RetryAfterMs+999)/1000, 10); ra != exp {
				t.Errorf("Retry-After: got %q, want %q", ra, exp)
			}
			if !slices.Contains(tc.retryAfter, ra) {
				t.Errorf("Retry-After: got %q, want one of %q", ra, tc.retryAfter)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	for name, tc := range map[string]struct {
		err       error
		status    int
		kind      string
		lockState api.ProblemLockState
	}{
		"released":           {status: 204},
		"expired":            {err: redlock.ErrLockExpired, status: 409, kind: "not-owner", lockState: api.ProblemLockStateExpired},
		"held by other":      {err: redlock.ErrHeldByOther, status: 409, kind: "not-owner", lockState: api.ProblemLockStateHeldByOther},
		"quorum unavailable": {err: redlock.ErrQuorumUnavailable, status: 503, kind: "quorum-unavailable"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.ReleaseFn = func(_ context.Context, namespace, resource, token string) error {
				if namespace != "" || resource != "a.b:c" || token != tokenA {
					t.Errorf("Release(%q, %q, %q)", namespace, resource, token)
				}
				return tc.err
			}
			_, h := newHandler(f, nil)
			w := serve(t, h, request{method: "DELETE", target: "/locks/a.b:c", headers: []string{"Lock-Token", tokenA}})
			if tc.err == nil {
				if w.Code != tc.status || w.Body.Len() != 0 {
					t.Errorf("got %d %q, want %d and no body", w.Code, w.Body, tc.status)
				}
				return
			}
			p := checkProblem(t, w, tc.status, tc.kind)
			if tc.lockState != "" && (p.LockState == nil || *p.LockState != tc.lockState) {
				t.Errorf("lock_state: got %v, want %q", p.LockState, tc.lockState)
			}
		})
	}
}

func TestExtend(t *testing.T) {
	for name, tc := range map[string]struct {
		body      string
		ttl       time.Duration
		err       error
		status    int
		kind      string
		lockState api.ProblemLockState
	}{
		"default TTL":        {ttl: 30 * time.Second, status: 200},
		"TTL":                {body: `{"ttl_ms": 5000}`, ttl: 5 * time.Second, status: 200},
		"expired":            {ttl: 30 * time.Second, err: redlock.ErrLockExpired, status: 409, kind: "not-owner", lockState: api.ProblemLockStateExpired},
		"held by other":      {ttl: 30 * time.Second, err: redlock.ErrHeldByOther, status: 409, kind: "not-owner", lockState: api.ProblemLockStateHeldByOther},
		"quorum unavailable": {ttl: 30 * time.Second, err: redlock.ErrQuorumUnavailable, status: 503, kind: "quorum-unavailable"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.ExtendFn = func(_ context.Context, namespace, resource, token string, ttl time.Duration) (redlock.Lock, error) {
				if namespace != "" || resource != "job" || token != tokenA || ttl != tc.ttl {
					t.Errorf("Extend(%q, %q, %q, %v)", namespace, resource, token, ttl)
				}
				if tc.err != nil {
					return redlock.Lock{}, tc.err
				}
				return testLock(resource, token, ttl), nil
			}
			_, h := newHandler(f, nil)
			w := serve(t, h, request{method: "PATCH", target: "/locks/job", body: tc.body, headers: []string{"Lock-Token", tokenA}})
			if tc.err == nil {
				got := decode[api.LockResponse](t, w, tc.status)
				if got.Token != tokenA || got.FencingToken != 42 || got.TTLMs != tc.ttl.Milliseconds() || got.Resource != "job" {
					t.Errorf("body: got %+v", got)
				}
				return
			}
			p := checkProblem(t, w, tc.status, tc.kind)
			if tc.lockState != "" && (p.LockState == nil || *p.LockState != tc.lockState) {
				t.Errorf("lock_state: got %v, want %q", p.LockState, tc.lockState)
			}
		})
	}
}

// TestInspect: a held lock is 200 held:true with the holder's fields; a free
// lock is 200 held:false with no other field (404 is only for paths that name
// no route, so that a wrong URL never reads as "free").
func TestInspect(t *testing.T) {
	f := newFake(t)
	f.InspectFn = func(_ context.Context, namespace, resource string) (redlock.Info, error) {
		switch resource {
		case "held":
			return redlock.Info{Resource: resource, Mode: redlock.ModeWrite, Owner: "host/1", Fence: 7, Remaining: 1500 * time.Millisecond, HeldNodes: 4}, nil
		case "readers":
			return redlock.Info{Resource: resource, Mode: redlock.ModeRead, Readers: 2, Fence: 8, Remaining: time.Second, HeldNodes: 3}, nil
		case "free":
			return redlock.Info{}, redlock.ErrNotHeld
		default:
			return redlock.Info{}, redlock.ErrQuorumUnavailable
		}
	}
	_, h := newHandler(f, nil)

	for target, exp := range map[string]map[string]any{
		"/locks/held": {"resource": "held", "held": true, "owner": "host/1", "fencing_token": 7.0,
			"remaining_ms": 1500.0, "held_nodes": 4.0, "mode": "write", "readers": 0.0},
		"/locks/readers": {"resource": "readers", "held": true, "owner": "", "fencing_token": 8.0,
			"remaining_ms": 1000.0, "held_nodes": 3.0, "mode": "read", "readers": 2.0},
		"/locks/free": {"resource": "free", "held": false},
	} {
		if got := decode[map[string]any](t, serve(t, h, request{method: "GET", target: target}), 200); !maps.Equal(got, exp) {
			t.Errorf("GET %s: got %v, want %v", target, got, exp)
		}
	}
	checkProblem(t, serve(t, h, request{method: "GET", target: "/locks/unknown"}), 503, "quorum-unavailable")
}
