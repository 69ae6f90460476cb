package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/redlock"
)

// TestClientGone: an operation cut short because its client went away (the
// request's context cancelled, the error context.Canceled joined to node
// errors) is logged with outcome client_gone and status 499 at info level,
// with no "quorum unavailable" line, and counted under client_gone; a node
// timeout (context.DeadlineExceeded) and a shutdown stay what they were.
func TestClientGone(t *testing.T) {
	nodeErrs := func(err error) error {
		return errors.Join(redlock.ErrQuorumUnavailable,
			&redlock.NodeError{Node: 0, Addr: "n0", Err: err}, &redlock.NodeError{Node: 1, Addr: "n1", Err: err}, err)
	}
	for _, tc := range []struct {
		name          string
		cancel        bool
		err           error
		outcome       string
		status        int
		level         string
		quorumLogLine bool
	}{
		{"client gone", true, nodeErrs(context.Canceled), "client_gone", 499, "info", false},
		{"client gone while waiting", true, errors.Join(&redlock.HeldError{}, context.Canceled), "client_gone", 499, "info", false},
		{"node timeout", false, nodeErrs(context.DeadlineExceeded), "quorum-unavailable", 503, "error", true},
		{"canceled, client still there", false, nodeErrs(context.Canceled), "quorum-unavailable", 503, "error", true},
		{"shutting down", true, errors.Join(errShuttingDown, context.Canceled), "shutting-down", 503, "info", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.AcquireFn = func(context.Context, string, redlock.AcquireOptions) (redlock.Lock, error) {
				return redlock.Lock{}, tc.err
			}
			f.StatusFn = func(context.Context) []redlock.NodeStatus { return nil }
			logs := &syncBuffer{}
			h := New(Config{Locker: f, Log: zerolog.New(logs), Metrics: NewMetrics()}).Handler()
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancel {
				cancel()
			}
			defer cancel()
			r := httptest.NewRequest(http.MethodPost, "/locks/x", nil).WithContext(ctx)
			h.ServeHTTP(httptest.NewRecorder(), r)
			var access map[string]any
			for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("log line %q: %v", l, err)
				}
				switch m["message"] {
				case "request":
					access = m
				case "quorum unavailable":
					if !tc.quorumLogLine {
						t.Errorf("unexpected line %v", m)
					}
				}
			}
			if access["outcome"] != tc.outcome || access["status"] != float64(tc.status) || access["level"] != tc.level {
				t.Errorf("access log %v, want outcome %s, status %d, level %s", access, tc.outcome, tc.status, tc.level)
			}
			if tc.outcome == "client_gone" && strings.Contains(logs.String(), "context canceled") {
				t.Errorf("node errors logged:\n%s", logs)
			}
			body := serve(t, h, request{method: "GET", target: "/metrics"}).Body.String()
			want := `redlockd_acquisitions_total{outcome="` + acquireOutcomes[tc.outcome] + `"} 1`
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %s", want)
			}
		})
	}
}

// TestNodeErrorsNotCanceled: a node call given up because the request was
// (its client went away) is no node error.
func TestNodeErrorsNotCanceled(t *testing.T) {
	m := NewMetrics()
	f := newFake(t)
	f.StatusFn = func(context.Context) []redlock.NodeStatus { return nil }
	h := New(Config{Locker: f, Metrics: m}).Handler()
	m.NodeCommand(t.Context(), "n0:1", time.Millisecond, &redlock.NodeError{Err: context.Canceled})
	m.NodeCommand(t.Context(), "n1:1", time.Millisecond, &redlock.NodeError{Err: context.DeadlineExceeded})
	body := serve(t, h, request{method: "GET", target: "/metrics"}).Body.String()
	if strings.Contains(body, `redlockd_node_command_errors_total{node="n0:1"}`) ||
		!strings.Contains(body, `redlockd_node_command_errors_total{node="n1:1"} 1`) {
		t.Errorf("node errors:\n%s", body)
	}
}

// TestKeysReplace: Replace swaps the whole set: the old keys stop working
// and the new ones work, through the same *Keys a server holds.
func TestKeysReplace(t *testing.T) {
	entry := func(name, key string) string {
		return `{"name":"` + name + `","namespace":"ns","sha256":"` + HashKey(key) + `"}`
	}
	k, err := ParseKeys([]byte(`{"keys":[` + entry("old", "old-key") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	n, err := ParseKeys([]byte(`{"keys":[` + entry("new", "new-key") + `,` + entry("other", "other-key") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	k.Replace(n)
	if _, ok := k.lookup("old-key"); ok {
		t.Error("the old key still works")
	}
	if e, ok := k.lookup("new-key"); !ok || e.name != "new" || k.Len() != 2 {
		t.Errorf("new key: %+v %v, %d keys", e, ok, k.Len())
	}
}
