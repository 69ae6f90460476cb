package tests

import (
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/promtest"
)

// metrics is a parsed Prometheus text exposition.
type metrics struct {
	text    string
	samples promtest.Samples
}

// scrapeMetrics gets /metrics (with header pairs hdr) and parses it.
func scrapeMetrics(t testing.TB, g *Gateway, hdr ...string) *metrics {
	t.Helper()
	r := g.do(t, http.MethodGet, "/metrics", "", hdr...)
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("/metrics Content-Type %q", ct)
	}
	return parseMetrics(t, string(r.Body))
}

// parseMetrics parses a Prometheus text exposition.
func parseMetrics(t testing.TB, text string) *metrics {
	t.Helper()
	ss, err := promtest.Parse(text)
	if err != nil {
		t.Fatalf("bad metrics: %v", err)
	}
	return &metrics{text: text, samples: ss}
}

// get returns the sum of the samples called name whose labels include the
// name=value pairs of labels, and whether there was any.
func (m *metrics) get(name string, labels ...string) (float64, bool) {
	return m.samples.Sum(name, labels...)
}

// value is get without the found flag.
func (m *metrics) value(name string, labels ...string) float64 {
	v, _ := m.get(name, labels...)
	return v
}

// TestMetrics: /metrics has the lock, wait, node and HTTP metrics of
// docs/operations.md "Monitoring"; counters and histograms move with the
// requests that feed them, the waiters gauge follows a waiting acquire, the
// node gauges follow a node's death, and no token shows (docs/operations.md
// "Security").
func TestMetrics(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes)
	before := scrapeMetrics(t, gw)
	for _, name := range []string{
		"redlockd_acquisitions_total", "redlockd_lock_operation_duration_seconds_bucket", "redlockd_waiters",
		"redlockd_wait_duration_seconds_bucket", "redlockd_node_up", "redlockd_node_quarantined",
		"redlockd_quorum", "redlockd_acquire_rounds_total",
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if _, ok := before.get(name); !ok {
			t.Errorf("no %s in /metrics", name)
		}
	}
	for _, n := range nodes {
		if up, ok := before.get("redlockd_node_up", "node", n.Addr); !ok || up != 1 {
			t.Errorf("node_up{node=%s} = %v, %v", n.Addr, up, ok)
		}
		if q, ok := before.get("redlockd_node_quarantined", "node", n.Addr); !ok || q != 0 {
			t.Errorf("node_quarantined{node=%s} = %v, %v", n.Addr, q, ok)
		}
	}

	res := resourceName(t)
	tok := lock(t, gw, res, `{"ttl_ms":20000}`).str(t, "token")
	wantProblem(t, acquire(t, gw, res, ""), http.StatusConflict, "lock-held")
	wantProblem(t, acquire(t, gw, res, `{"wait_ms":200}`), http.StatusConflict, "lock-held")
	wantStatus(t, inspect(t, gw, res), http.StatusOK)

	// A waiter shows in the gauge until it gets the lock.
	waiter := make(chan *Resp, 1)
	go func() {
		r, err := gw.try(http.MethodPost, "/locks/"+res, `{"wait_ms":20000}`)
		if err != nil {
			t.Error(err)
		}
		waiter <- r
	}()
	eventually(t, 10*time.Second, "redlockd_waiters = 1", func() bool {
		return scrapeMetrics(t, gw).value("redlockd_waiters") == 1
	})
	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	select {
	case r := <-waiter:
		wantStatus(t, r, http.StatusCreated)
		tok = r.str(t, "token")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)

	after := scrapeMetrics(t, gw)
	for _, name := range []string{"redlockd_node_command_duration_seconds_bucket", "redlockd_http_requests_total", "redlockd_http_request_duration_seconds_bucket"} {
		if _, ok := after.get(name); !ok {
			t.Errorf("no %s in /metrics after requests", name)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"redlockd_acquisitions_total", []string{"outcome", "acquired"}, 2},
		{"redlockd_acquisitions_total", []string{"outcome", "held"}, 2},
		{"redlockd_http_requests_total", []string{"route", "/locks/{resource}", "method", "POST", "status", "201"}, 2},
		{"redlockd_http_requests_total", []string{"route", "/locks/{resource}", "method", "DELETE", "status", "204"}, 2},
		{"redlockd_http_requests_total", []string{"route", "/locks/{resource}", "method", "GET", "status", "200"}, 1},
		{"redlockd_http_request_duration_seconds_count", []string{"route", "/locks/{resource}", "method", "POST"}, 4},
		{"redlockd_lock_operation_duration_seconds_count", []string{"op", "acquire"}, 2},
		{"redlockd_lock_operation_duration_seconds_count", []string{"op", "release"}, 2},
		{"redlockd_lock_operation_duration_seconds_count", []string{"op", "inspect"}, 1},
		{"redlockd_wait_duration_seconds_count", []string{"acquired", "false"}, 1},
		{"redlockd_wait_duration_seconds_count", []string{"acquired", "true"}, 1},
	} {
		if got := after.value(c.name, c.labels...) - before.value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := after.value("redlockd_waiters"); got != 0 {
		t.Errorf("redlockd_waiters = %v after the wait", got)
	}
	for _, n := range nodes {
		// Each acquire, release and inspect sent at least one command to
		// each node. A round is decided at the quorum: the slowest node's
		// command is timed when it ends, within the node timeout.
		eventually(t, 10*time.Second, "5 commands or more timed on node "+n.Addr, func() bool {
			return scrapeMetrics(t, gw).value("redlockd_node_command_duration_seconds_count", "node", n.Addr)-
				before.value("redlockd_node_command_duration_seconds_count", "node", n.Addr) >= 5
		})
	}
	if strings.Contains(after.text, tok) {
		t.Error("a token appears in /metrics")
	}

	// A dead node: up 0, and its failed commands are counted.
	dead := nodes[0]
	dead.Kill()
	lock(t, gw, resourceName(t), "")
	eventually(t, 10*time.Second, "node_up 0 for the killed node", func() bool {
		return scrapeMetrics(t, gw).value("redlockd_node_up", "node", dead.Addr) == 0
	})
	final := scrapeMetrics(t, gw)
	if final.value("redlockd_node_command_errors_total", "node", dead.Addr) < 1 {
		t.Errorf("no command error counted for the killed node")
	}
	if final.value("redlockd_node_up", "node", nodes[1].Addr) != 1 {
		t.Errorf("a live node is shown down")
	}
}

// TestMetricsFormats: behind --metrics-auth, /metrics needs a key, speaks
// OpenMetrics to a scraper that asks for it and gzip to one that accepts it,
// and redlockd_build_info names the binary's version (as `redlockd version`
// prints it), VCS revision and Go version (docs/operations.md "Monitoring";
// openapi.yaml /metrics).
func TestMetricsFormats(t *testing.T) {
	t.Parallel()
	key := keygen(t, "scraper", "ops")
	gw := startGateway(t, startCluster(t, 1), "--api-keys-file", keysFile(t, key), "--metrics-auth", "on")
	wantProblem(t, gw.do(t, http.MethodGet, "/metrics", "", "Accept", "application/openmetrics-text", "Accept-Encoding", "gzip"),
		http.StatusUnauthorized, "unauthorized")

	out, err := exec.Command(binPath, "version").Output() // redlockd VERSION (GOVERSION)
	if err != nil || len(strings.Fields(string(out))) < 2 {
		t.Fatalf("redlockd version: %q, %v", out, err)
	}
	bi, err := buildinfo.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	revision := ""
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	labels := []string{"version", strings.Fields(string(out))[1], "revision", revision, "goversion", bi.GoVersion}
	if v, ok := scrapeMetrics(t, gw, bearer(key.Key)...).get("redlockd_build_info", labels...); !ok || v != 1 {
		t.Errorf("redlockd_build_info%q = %v, %v; want 1", labels, v, ok)
	}

	om := gw.do(t, http.MethodGet, "/metrics", "", append(bearer(key.Key), "Accept", "application/openmetrics-text")...)
	wantStatus(t, om, http.StatusOK)
	if ct := om.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text; version=") {
		t.Errorf("OpenMetrics Content-Type %q", ct)
	}
	if !strings.HasSuffix(string(om.Body), "# EOF\n") || !strings.Contains(string(om.Body), "# TYPE redlockd_build_info gauge\n") {
		t.Errorf("not OpenMetrics with build_info:\n%s", om.Body)
	}

	gz := gw.do(t, http.MethodGet, "/metrics", "", append(bearer(key.Key), "Accept-Encoding", "gzip")...)
	wantStatus(t, gz, http.StatusOK)
	if ce := gz.Header.Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", ce)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz.Body))
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := parseMetrics(t, string(text)).get("redlockd_build_info", labels...); !ok {
		t.Errorf("no redlockd_build_info in the gzipped scrape")
	}
}

// TestKeysMetric: redlockd_keys counts each namespace's keys on a node, so a
// tenant that touches many names shows, by the fence counter each leaves for
// --fence-idle-ttl (docs/operations.md "Monitoring").
func TestKeysMetric(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ci, web := keygen(t, "ci", "ci"), keygen(t, "web", "web")
	keys := keysFile(t, ci, web)
	a := startGateway(t, nodes, "--api-keys-file", keys)
	for i, k := range []apiKey{ci, ci, ci, ci, ci, web, web} {
		res := fmt.Sprintf("%s-%d", resourceName(t), i)
		r := a.do(t, http.MethodPost, "/locks/"+res, "", bearer(k.Key)...)
		wantStatus(t, r, http.StatusCreated)
		wantStatus(t, a.do(t, http.MethodDelete, "/locks/"+res, "", append(bearer(k.Key), "Lock-Token", r.str(t, "token"))...), http.StatusNoContent)
	}
	// A gateway counts at start, then every minute.
	b := startGateway(t, nodes, "--api-keys-file", keys)
	eventually(t, 10*time.Second, "the census", func() bool {
		_, ok := scrapeMetrics(t, b).get("redlockd_keys", "namespace", "ci")
		return ok
	})
	m := scrapeMetrics(t, b)
	if c, w := m.value("redlockd_keys", "namespace", "ci"), m.value("redlockd_keys", "namespace", "web"); c < 5 || w < 2 || w >= c {
		t.Fatalf("redlockd_keys: ci %v, web %v; want at least a fence counter per name used (5, 2)", c, w)
	}
}
