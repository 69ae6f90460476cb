package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

func TestRequestID(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	for _, tc := range []struct {
		in   string
		keep bool
	}{
		{"", false},
		{"abc-123_X.y", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"a b", false},
		{"a\"b", false},
	} {
		for _, req := range []request{
			{method: "GET", target: "/healthz"},
			{method: "GET", target: "/nope"},
			{method: "PUT", target: "/healthz"},
			{method: "DELETE", target: "/locks/x"},
		} {
			if tc.in != "" {
				req.headers = []string{"X-Request-Id", tc.in}
			}
			got := serve(t, h, req).Header().Get("X-Request-Id")
			if tc.keep && got != tc.in || !tc.keep && (got == tc.in || !requestIDRe.MatchString(got)) {
				t.Errorf("%s %s with X-Request-Id %q: got %q", req.method, req.target, tc.in, got)
			}
		}
	}
}

// TestAccessLog checks that there is one line per request with its fields,
// the fencing token on lock answers only, and that no lock token ever reaches
// the log.
func TestAccessLog(t *testing.T) {
	f := newFake(t)
	f.AcquireFn = func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		if o.Token == "" {
			return redlock.Lock{}, &redlock.HeldError{Remaining: time.Second}
		}
		return testLock(resource, o.Token, o.TTL), nil
	}
	f.ExtendFn = func(_ context.Context, _, resource, token string, ttl time.Duration) (redlock.Lock, error) {
		return testLock(resource, token, ttl), nil
	}
	f.ReleaseFn = func(context.Context, string, string, string) error { return redlock.ErrHeldByOther }
	f.InspectFn = func(_ context.Context, _, resource string) (redlock.Info, error) {
		return redlock.Info{Resource: resource, Owner: "me", Fence: 43, Remaining: time.Second, HeldNodes: 5}, nil
	}
	log := &syncBuffer{}
	_, h := newHandler(f, log)

	reqs := []request{
		{method: "POST", target: "/locks/job", body: `{"token": "` + tokenA + `", "owner": "me"}`, headers: []string{"User-Agent", `app/1.0 "x"`}},
		{method: "POST", target: "/locks/job"},
		{method: "PATCH", target: "/locks/job", headers: []string{"Lock-Token", tokenA, "X-Request-Id", "req-1"}},
		{method: "DELETE", target: "/locks/job", headers: []string{"Lock-Token", tokenB}},
		{method: "DELETE", target: "/locks/job", headers: []string{"Lock-Token", tokenB + "!"}},
		{method: "POST", target: "/locks/job", body: `{"token": "` + tokenB + `", "x": 1}`},
		{method: "POST", target: "/locks/a%2F" + tokenB},
		{method: "GET", target: "/nope/" + tokenB},
		{method: "GET", target: "/locks/job"},
	}
	for _, req := range reqs {
		serve(t, h, req)
	}

	out := log.String()
	for _, secret := range []string{tokenA, tokenB, "Lock-Token", `"me"`} {
		if strings.Contains(out, secret) {
			t.Errorf("log contains %q:\n%s", secret, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(reqs) {
		t.Fatalf("got %d log lines, want %d:\n%s", len(lines), len(reqs), out)
	}
	for i, exp := range []string{
		`"method":"POST","route":"/locks/{resource}","resource":"job","status":201,`,
		`"method":"POST","route":"/locks/{resource}","resource":"job","status":409,`,
		`"method":"PATCH","route":"/locks/{resource}","resource":"job","status":200,`,
		`"method":"DELETE","route":"/locks/{resource}","resource":"job","status":409,`,
		`"method":"DELETE","route":"/locks/{resource}","resource":"job","status":400,`,
		`"method":"POST","route":"/locks/{resource}","resource":"job","status":400,`,
		`"method":"POST","route":"/locks/{resource}","resource":"","status":400,`,
		`"method":"GET","route":"","resource":"","status":404,`,
		`"method":"GET","route":"/locks/{resource}","resource":"job","status":200,`,
	} {
		if !strings.Contains(lines[i], exp) {
			t.Errorf("line %d: got %s, want it to contain %s", i, lines[i], exp)
		}
	}
	fences := map[int]int64{0: 42, 2: 42, 8: 43} // the lines of lock answers
	for i, outcome := range []string{"acquired", "lock-held", "extended", "not-owner", "invalid-request", "invalid-request", "invalid-request", "not-found", "held"} {
		var v struct {
			Level, Message, Outcome string
			ReqID                   string   `json:"req_id"`
			LatencyMs               *float64 `json:"latency_ms"`
			RemoteAddr              string   `json:"remote_addr"`
			UserAgent               *string  `json:"user_agent"`
			FencingToken            int64    `json:"fencing_token"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &v); err != nil {
			t.Fatal(err)
		}
		if v.Level != "info" || v.Message != "request" || v.Outcome != outcome || v.LatencyMs == nil || !requestIDRe.MatchString(v.ReqID) {
			t.Errorf("line %d: got %s, want outcome %s", i, lines[i], outcome)
		}
		if v.RemoteAddr != "192.0.2.1:1234" || v.FencingToken != fences[i] || (v.UserAgent != nil) != (i == 0) {
			t.Errorf("line %d: got %s, want remote_addr, fencing_token %d, user_agent only on line 0", i, lines[i], fences[i])
		}
	}
	if !strings.Contains(lines[0], `"user_agent":"app/1.0 \"x\""`) {
		t.Errorf("line 0: got %s, want the user agent, escaped", lines[0])
	}
	if !strings.Contains(lines[2], `"req_id":"req-1"`) {
		t.Errorf("line 2: got %s, want req_id req-1", lines[2])
	}
}

// TestPanic checks that a panic in a handler is a 500 that shows nothing of
// it, logged as an internal error on a line of its own that carries the
// request's fields, as its access line does.
func TestPanic(t *testing.T) {
	f := newFake(t)
	f.InspectFn = func(context.Context, string, string) (redlock.Info, error) { panic("boom " + tokenA) }
	log := &syncBuffer{}
	_, h := newHandler(f, log)
	w := serve(t, h, request{method: "GET", target: "/locks/x", headers: []string{"X-Request-Id", "req-p", "User-Agent", "app/2"}})
	body := w.Body.String()
	checkProblem(t, w, http.StatusInternalServerError, "internal")
	if strings.Contains(body, "boom") || strings.Contains(body, "goroutine") {
		t.Errorf("body leaks the panic: %s", body)
	}
	if out := log.String(); !strings.Contains(out, "boom") || !strings.Contains(out, `"status":500`) {
		t.Errorf("log: %s", out)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"message":"internal error"`) {
		t.Fatalf("got %q, want the internal error's line and the access line", lines)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"req_id":"req-p","remote_addr":"192.0.2.1:1234","user_agent":"app/2"`) {
			t.Errorf("got %s, want the request's fields", l)
		}
	}
}

// TestAccessLogUnready checks that a /readyz 503, which probes repeat for as
// long as the gateway is unready, is logged at info level, and that each
// change of the answer is logged once: a warning when it turns unready.
func TestAccessLogUnready(t *testing.T) {
	f := newFake(t)
	up := true
	f.StatusFn = func(context.Context) []redlock.NodeStatus {
		return []redlock.NodeStatus{{Addr: "a:6379", Up: up}, {Addr: "b:6379", Up: up}, {Addr: "c:6379", Up: true}}
	}
	log := &syncBuffer{}
	_, h := newHandler(f, log)
	var levels []string
	seen := 0
	for _, ready := range []bool{true, false, false, false, true, true, false} {
		up = ready
		serve(t, h, request{method: "GET", target: "/readyz"})
		out := log.String()
		var lines []string
		for l := range strings.Lines(out[seen:]) {
			var v struct{ Level, Message string }
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatal(err)
			}
			if v.Message == "request" {
				if v.Level != "info" || ready != strings.Contains(l, `"status":200,`) {
					t.Errorf("ready %v: got access line %s, want info level", ready, l)
				}
				continue
			}
			lines = append(lines, v.Level)
		}
		levels = append(levels, strings.Join(lines, ","))
		seen = len(out)
	}
	if got, want := strings.Join(levels, " "), " warn   info  warn"; got != want {
		t.Errorf("readiness change lines: got %q, want %q", got, want)
	}
}
