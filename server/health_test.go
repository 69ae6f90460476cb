package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/redlockd/redlockd"
	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

func TestHealthz(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	got := decode[api.HealthResponse](t, serve(t, h, request{method: "GET", target: "/healthz"}), 200)
	if got.Status != api.HealthResponseStatusOk {
		t.Errorf("got %+v", got)
	}
}

func TestReadyz(t *testing.T) {
	later := time.Now().Add(time.Minute)
	up := redlock.NodeStatus{Addr: "a:6379", Up: true, Latency: 210 * time.Microsecond, Quarantine: "durable: appendonly yes, appendfsync always"}
	down := redlock.NodeStatus{Addr: "b:6379", Err: "connection refused"}
	quarantined := redlock.NodeStatus{Addr: "c:6379", Up: true, Latency: time.Millisecond, QuarantinedUntil: later,
		Quarantine: "restarted 1s ago, not durable (appendonly no, appendfsync everysec): quarantined for max TTL (1m0s)"}
	pastQuarantine := redlock.NodeStatus{Addr: "d:6379", Up: true, QuarantinedUntil: time.Now().Add(-time.Second)}
	slow := redlock.NodeStatus{Addr: "e:6379", Up: true, Slow: true, Latency: 40 * time.Millisecond}

	for name, tc := range map[string]struct {
		nodes  []redlock.NodeStatus
		status int
	}{
		"all up":               {[]redlock.NodeStatus{up, up, up, up, up}, 200},
		"bare quorum":          {[]redlock.NodeStatus{up, down, up, down, pastQuarantine}, 200},
		"too few up":           {[]redlock.NodeStatus{up, down, up, down, down}, 503},
		"quarantine not votes": {[]redlock.NodeStatus{up, quarantined, up, quarantined, down}, 503},
		"slow votes":           {[]redlock.NodeStatus{up, slow, slow, down, down}, 200},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.StatusFn = func(context.Context) []redlock.NodeStatus { return tc.nodes }
			_, h := newHandler(f, nil)
			got := decode[api.ReadyResponse](t, serve(t, h, request{method: "GET", target: "/readyz"}), tc.status)
			exp := api.ReadyResponseStatusReady
			if tc.status != 200 {
				exp = api.ReadyResponseStatusUnready
			}
			if got.Status != exp || got.Quorum != 3 || len(got.Nodes) != len(tc.nodes) {
				t.Fatalf("got %+v", got)
			}
			for i, n := range got.Nodes {
				want := tc.nodes[i]
				if n.Addr != want.Addr || n.Up != want.Up || n.Slow != want.Slow {
					t.Errorf("node %d: got %+v, want %+v", i, n, want)
				}
				if want.QuarantinedUntil.After(time.Now()) != (n.QuarantinedUntil != nil) {
					t.Errorf("node %d: quarantined_until %v", i, n.QuarantinedUntil)
				}
			}
		})
	}

	t.Run("body", func(t *testing.T) {
		f := newFake(t)
		f.StatusFn = func(context.Context) []redlock.NodeStatus { return []redlock.NodeStatus{up, quarantined} }
		_, h := newHandler(f, nil)
		w := serve(t, h, request{method: "GET", target: "/readyz"})
		exp := `{"nodes":[{"addr":"a:6379","latency_ms":0.21,"quarantine":"durable: appendonly yes, appendfsync always","quarantined_until":null,"slow":false,"up":true},` +
			`{"addr":"c:6379","latency_ms":1,"quarantine":"restarted 1s ago, not durable (appendonly no, appendfsync everysec): quarantined for max TTL (1m0s)","quarantined_until":"` + later.UTC().Format(timeLayout) + `","slow":false,"up":true}],"quorum":3,"status":"unready"}` + "\n"
		if got := w.Body.String(); got != exp {
			t.Errorf("got  %s\nwant %s", got, exp)
		}
	})
}

func TestOpenAPI(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	w := serve(t, h, request{method: "GET", target: "/openapi.yaml"})
	body, _ := io.ReadAll(w.Body)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/yaml" || !bytes.Equal(body, redlockd.OpenAPI) {
		t.Errorf("got %d %q, %d bytes", w.Code, w.Header().Get("Content-Type"), len(body))
	}
}
