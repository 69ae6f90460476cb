package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/redlockd/redlockd"
	"github.com/redlockd/redlockd/redlock"
)

// The HTTP contract of issue 16 item 4: a free lock is 200 held:false, 404
// is only for paths that name no route, every GET route answers HEAD, and a
// 405 lists the path's methods in Allow; over HTTP/1.1 and HTTP/2.

// protoServers serves h over HTTP/1.1 and over HTTP/2 (TLS), and returns a
// client for each, by name.
func protoServers(t *testing.T, h http.Handler) map[string]func(method, path string) *http.Response {
	t.Helper()
	h1 := httptest.NewServer(h)
	t.Cleanup(h1.Close)
	h2 := httptest.NewUnstartedServer(h)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	send := func(srv *httptest.Server, proto int) func(method, path string) *http.Response {
		return func(method, path string) *http.Response {
			t.Helper()
			req, err := http.NewRequest(method, srv.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if res.ProtoMajor != proto {
				t.Fatalf("%s %s: answered over %s, want HTTP/%d", method, path, res.Proto, proto)
			}
			return res
		}
	}
	return map[string]func(method, path string) *http.Response{"HTTP/1.1": send(h1, 1), "HTTP/2": send(h2, 2)}
}

// readAll reads and closes res's body.
func readAll(t *testing.T, res *http.Response) []byte {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// inspectFake is a fake Locker whose lock "held" is held, whose lock "down"
// cannot be told, and whose other locks are free; its nodes are all up.
func inspectFake(t *testing.T) *fakeLocker {
	f := newFake(t)
	f.InspectFn = func(_ context.Context, _, resource string) (redlock.Info, error) {
		switch resource {
		case "held":
			return redlock.Info{Resource: resource, Owner: "o", Fence: 3, Remaining: time.Second, HeldNodes: 5}, nil
		case "down":
			return redlock.Info{}, redlock.ErrQuorumUnavailable
		}
		return redlock.Info{}, redlock.ErrNotHeld
	}
	f.StatusFn = func(context.Context) []redlock.NodeStatus {
		return []redlock.NodeStatus{{Addr: "a:1", Up: true}, {Addr: "b:1", Up: true}, {Addr: "c:1", Up: true}}
	}
	return f
}

// TestHead: HEAD on every GET route gives the GET's status and headers
// with no body, over HTTP/1.1 and HTTP/2.
func TestHead(t *testing.T) {
	withMetrics := New(Config{Locker: inspectFake(t), Metrics: NewMetrics()}).Handler()
	_, noMetrics := newHandler(inspectFake(t), nil)
	for name, h := range map[string]http.Handler{"metrics": withMetrics, "no metrics": noMetrics} {
		for proto, send := range protoServers(t, h) {
			for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml", "/metrics",
				"/locks/held", "/locks/free", "/locks/down", "/locks/a%2Fb", "/locks/%2E", "/nope"} {
				get := send(http.MethodGet, path)
				getBody := readAll(t, get)
				head := send(http.MethodHead, path)
				headBody := readAll(t, head)
				what := name + " " + proto + " HEAD " + path
				if head.StatusCode != get.StatusCode {
					t.Errorf("%s: status %d, GET %d", what, head.StatusCode, get.StatusCode)
				}
				if len(headBody) != 0 {
					t.Errorf("%s: body %q", what, headBody)
				}
				if len(getBody) == 0 {
					t.Errorf("%s: the GET has no body to compare with", what)
				}
				for _, k := range []string{"Content-Type", "Allow", "WWW-Authenticate", "Location"} {
					if g, h := get.Header.Values(k), head.Header.Values(k); strings.Join(g, ",") != strings.Join(h, ",") {
						t.Errorf("%s: %s %q, GET %q", what, k, h, g)
					}
				}
				if head.Header.Get("X-Request-Id") == "" {
					t.Errorf("%s: no X-Request-Id", what)
				}
				// The length of a body that does not change between
				// the two requests.
				if path != "/metrics" && get.ContentLength >= 0 && head.ContentLength != get.ContentLength &&
					head.Header.Get("Content-Length") != "" {
					t.Errorf("%s: Content-Length %d, GET %d", what, head.ContentLength, get.ContentLength)
				}
			}
		}
	}
}

// TestAllowHeader: a 405 lists the path's methods, HEAD with GET, over
// HTTP/1.1 and HTTP/2.
func TestAllowHeader(t *testing.T) {
	_, h := newHandler(inspectFake(t), nil)
	for proto, send := range protoServers(t, h) {
		for path, exp := range map[string]string{
			"/locks/x":      "GET, HEAD, POST, PATCH, DELETE",
			"/locks/%2E":    "GET, HEAD, POST, PATCH, DELETE",
			"/healthz":      "GET, HEAD",
			"/readyz":       "GET, HEAD",
			"/metrics":      "GET, HEAD",
			"/openapi.yaml": "GET, HEAD",
		} {
			for _, method := range []string{http.MethodPut, http.MethodOptions, "BREW"} {
				res := send(method, path)
				readAll(t, res)
				if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != exp {
					t.Errorf("%s %s %s: %d, Allow %q; want 405, Allow %q", proto, method, path, res.StatusCode, res.Header.Get("Allow"), exp)
				}
			}
		}
	}
}

// TestFreeIsNotNotFound: inspecting a free lock is 200 held:false, and a
// path that names no route (a wrong prefix, a typo) is 404 not-found, so the
// two can never be taken for one another.
func TestFreeIsNotNotFound(t *testing.T) {
	_, h := newHandler(inspectFake(t), nil)
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		w := serve(t, h, request{method: method, target: "/locks/free"})
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s a free lock: %d %s", method, w.Code, w.Header().Get("Content-Type"))
		}
	}
	if got := decode[map[string]any](t, serve(t, h, request{method: "GET", target: "/locks/free"}), 200); len(got) != 2 ||
		got["resource"] != "free" || got["held"] != false {
		t.Errorf("a free lock: %v, want exactly resource and held false", got)
	}
	for _, target := range []string{"/v1/locks/free", "/lock/free", "/locks/free/", "/locks/free/x", "/api/locks/free", "/Locks/free"} {
		checkProblem(t, serve(t, h, request{method: "GET", target: target}), 404, "not-found")
	}
}

// TestNotFoundMeansNoRoute: of the errors a Locker returns, none is 404:
// problemFor answers 404 only for a path with no route (or /metrics
// without metrics).
func TestNotFoundMeansNoRoute(t *testing.T) {
	s := New(Config{Locker: newFake(t)})
	for _, err := range []error{redlock.ErrNotHeld, redlock.ErrLockHeld, redlock.ErrNotOwner, redlock.ErrLockExpired,
		redlock.ErrHeldByOther, redlock.ErrQuorumUnavailable, redlock.ErrInvalid, errors.New("other")} {
		if p := s.problemFor(err); p.status == http.StatusNotFound {
			t.Errorf("problemFor(%v) = 404 %s", err, p.kind)
		}
	}
	for _, err := range []error{errNoRoute, errNoMetrics} {
		if p := s.problemFor(err); p.status != http.StatusNotFound || p.kind != "not-found" {
			t.Errorf("problemFor(%v) = %d %s, want 404 not-found", err, p.status, p.kind)
		}
	}
}

// TestResourcePattern: the resource pattern in openapi.yaml (with its
// maxLength) accepts exactly the names redlock.ValidName does.
func TestResourcePattern(t *testing.T) {
	var spec struct {
		Components struct {
			Parameters struct {
				Resource struct {
					Schema struct {
						MinLength int    `yaml:"minLength"`
						MaxLength int    `yaml:"maxLength"`
						Pattern   string `yaml:"pattern"`
					}
				} `yaml:"Resource"`
			}
		}
	}
	if err := yaml.Unmarshal(redlockd.OpenAPI, &spec); err != nil {
		t.Fatal(err)
	}
	schema := spec.Components.Parameters.Resource.Schema
	re, err := regexp.Compile(schema.Pattern)
	if err != nil {
		t.Fatalf("pattern %q: %v", schema.Pattern, err)
	}
	if schema.MinLength != 1 || schema.MaxLength != redlock.MaxNameLen {
		t.Errorf("length %d..%d, want 1..%d", schema.MinLength, schema.MaxLength, redlock.MaxNameLen)
	}
	cases := []string{"", ".", "..", "...", ".a", "a.", "..a", "a..", ":", "-", "_", "a", "a/b", "a b", "é",
		strings.Repeat(".", 200), strings.Repeat(".", 201), strings.Repeat("a", 200), strings.Repeat("a", 201)}
	for _, s := range cases {
		inSpec := len(s) >= schema.MinLength && len(s) <= schema.MaxLength && re.MatchString(s)
		if inSpec != redlock.ValidName(s) {
			t.Errorf("%q: the spec says valid=%v, ValidName %v", s, inSpec, redlock.ValidName(s))
		}
	}
}
