package tests

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/client"
)

// The HTTP contract (openapi.yaml): a free lock is 200 held:false and
// 404 not-found is only for paths that name no route, so that a wrong base
// URL never reads as "the lock is free"; every GET route answers HEAD; a 405
// carries Allow, over HTTP/1.1 and HTTP/2; the names "." and ".." are 400.

// isNotHeld reports whether r is GET /locks/{resource}'s answer for a free
// lock: 200 with held false.
func isNotHeld(r *Resp) bool {
	return r.Status == http.StatusOK && r.JSON != nil && r.JSON["held"] == false
}

// wantNotHeld asserts that r is GET /locks/{resource}'s answer for a free
// lock: 200 {"resource": …, "held": false} and nothing else.
func wantNotHeld(t testing.TB, r *Resp) {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", r.Method, r.Path, ct)
	}
	res, _ := strings.CutPrefix(r.Path, "/locks/")
	if len(r.JSON) != 2 || r.JSON["held"] != false || r.JSON["resource"] != res {
		t.Errorf("%s %s: %s, want exactly {\"resource\":%q,\"held\":false}", r.Method, r.Path, r.Body, res)
	}
}

// TestContract: over HTTP/1.1, a free lock is 200 with held false, and 404
// not-found means only that the path names no route (the Go client reports a
// wrong base URL as ErrNotFound, never as a free lock); every GET route
// answers HEAD with the GET's status and headers and no body; a 405 lists the
// path's methods in Allow; "." and ".." (encoded or not) are 400 on every
// method and change nothing (openapi.yaml info.description "Conventions" and
// "Behaviour where the specification is silent", GET /locks/{resource}).
func TestContract(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes)

	t.Run("FreeIsHeldFalse", func(t *testing.T) {
		res := resourceName(t)
		wantNotHeld(t, inspectAnswered(t, gw, res))

		a := lock(t, gw, res, `{"ttl_ms":10000,"owner":"me"}`)
		r := inspect(t, gw, res)
		wantStatus(t, r, http.StatusOK)
		if r.JSON["held"] != true || r.str(t, "owner") != "me" || r.num(t, "fencing_token") != a.num(t, "fencing_token") ||
			r.num(t, "remaining_ms") <= 0 || r.str(t, "resource") != res {
			t.Errorf("held lock: %s", r.Body)
		}
		wantCount(t, r, "held_nodes", 2, 3)
		wantNoSecret(t, r, a.str(t, "token"))

		wantStatus(t, release(t, gw, res, a.str(t, "token")), http.StatusNoContent)
		wantNotHeld(t, inspectAnswered(t, gw, res))
	})

	t.Run("NoRouteIsNotFound", func(t *testing.T) {
		res := resourceName(t)
		for _, path := range []string{"/v1/locks/" + res, "/lock/" + res, "/api/locks/" + res, "/Locks/" + res,
			"/locks/" + res + "/x", "/locks/", "/healthz/x", "/"} {
			wantProblem(t, gw.do(t, http.MethodGet, path, ""), http.StatusNotFound, "not-found")
			h := gw.do(t, http.MethodHead, path, "")
			if h.Status != http.StatusNotFound || len(h.Body) != 0 {
				t.Errorf("HEAD %s: %d %q, want 404 without a body", path, h.Status, h.Body)
			}
		}
		wantProblem(t, gw.do(t, http.MethodDelete, "/v1/locks/"+res, "", "Lock-Token", clientToken(t)), http.StatusNotFound, "not-found")
	})

	t.Run("ClientWrongBaseURL", func(t *testing.T) {
		ctx := context.Background()
		res := resourceName(t)
		good, err := client.New(gw.URL, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if info, err := good.Inspect(ctx, res); err != nil || info.Held || info.Resource != res {
			t.Errorf("Inspect of a free lock: %+v, %v; want Held false, no error", info, err)
		}
		for _, base := range []string{gw.URL + "/v1", gw.URL + "/redlockd/", gw.URL + "/locks"} {
			c, err := client.New(base, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			info, err := c.Inspect(ctx, res)
			if !errors.Is(err, client.ErrNotFound) || info.Held {
				t.Errorf("Inspect through %s: %+v, %v; want client.ErrNotFound", base, info, err)
			}
			_, err = c.Acquire(ctx, res, client.AcquireOptions{})
			if !errors.Is(err, client.ErrNotFound) {
				t.Errorf("Acquire through %s: %v, want client.ErrNotFound", base, err)
			}
		}
		wantNotHeld(t, inspectAnswered(t, gw, res))
	})

	t.Run("HeadHasNoBody", func(t *testing.T) {
		held := resourceName(t)
		lock(t, gw, held, `{"ttl_ms":30000}`)
		for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml", "/metrics", "/locks/" + held,
			"/locks/" + resourceName(t), "/locks/a%2Fb", "/nope"} {
			get := gw.do(t, http.MethodGet, path, "")
			head, next := headThenGet(t, gw, path)
			if head.StatusCode != get.Status {
				t.Errorf("HEAD %s: %d, GET %d", path, head.StatusCode, get.Status)
			}
			if h, g := head.Header.Get("Content-Type"), get.Header.Get("Content-Type"); h != g {
				t.Errorf("HEAD %s: Content-Type %q, GET %q", path, h, g)
			}
			if head.Header.Get("X-Request-Id") == "" {
				t.Errorf("HEAD %s: no X-Request-Id", path)
			}
			if (path == "/healthz" || path == "/openapi.yaml") && head.ContentLength != int64(len(get.Body)) {
				t.Errorf("HEAD %s: Content-Length %d, GET's body %d bytes", path, head.ContentLength, len(get.Body))
			}
			// A body after the HEAD's headers would have been read as
			// the next response.
			if next != `{"status":"ok"}` {
				t.Errorf("HEAD %s: the next response on the connection is %q: the HEAD sent a body", path, next)
			}
		}
	})

	t.Run("AllowHTTP1", func(t *testing.T) { wantAllow(t, httpClient, gw.URL, 1) })

	t.Run("DotNames", func(t *testing.T) {
		held := resourceName(t)
		tok := lock(t, gw, held, `{"ttl_ms":30000}`).str(t, "token")
		waitHolders(t, nodes, held, tok, 3) // the snapshot sees no late write
		before := keySnapshot(t, nodes)
		for _, name := range []string{".", "..", "%2E", "%2e", "%2e%2e", "%2E%2E", ".%2E", "%2e."} {
			path := "/locks/" + name
			for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodHead} {
				r := gw.do(t, m, path, "")
				if m == http.MethodHead {
					wantStatus(t, r, http.StatusBadRequest)
				} else {
					wantProblem(t, r, http.StatusBadRequest, "invalid-request")
				}
			}
			wantProblem(t, gw.do(t, http.MethodPost, path, `{"ttl_ms":5000,"token":"`+tok+`"}`), http.StatusBadRequest, "invalid-request")
			wantProblem(t, gw.do(t, http.MethodPatch, path, "", "Lock-Token", tok), http.StatusBadRequest, "invalid-request")
			wantProblem(t, gw.do(t, http.MethodDelete, path, "", "Lock-Token", tok), http.StatusBadRequest, "invalid-request")
		}
		if after := keySnapshot(t, nodes); after != before {
			t.Fatalf("lock state changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// headThenGet sends HEAD path and then GET /healthz on one HTTP/1.1
// connection to gw, and returns the HEAD's response and the GET's body.
// Were a body sent after the HEAD's headers, it would be read as the start
// of the second response.
func headThenGet(t *testing.T, gw *Gateway, path string) (*http.Response, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(gw.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := fmt.Fprintf(conn, "HEAD %s HTTP/1.1\r\nHost: redlockd\r\n\r\nGET /healthz HTTP/1.1\r\nHost: redlockd\r\nConnection: close\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	head, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatalf("HEAD %s: %v", path, err)
	}
	next, err := http.ReadResponse(br, nil)
	if err != nil {
		return head, "unreadable: " + err.Error()
	}
	defer next.Body.Close()
	body, _ := io.ReadAll(next.Body)
	return head, strings.TrimSpace(string(body))
}

// wantAllow checks the Allow header of 405 answers from base through c, and
// that they came over HTTP/proto.
func wantAllow(t *testing.T, c *http.Client, base string, proto int) {
	t.Helper()
	for path, exp := range map[string]string{
		"/locks/x":      "GET, HEAD, POST, PATCH, DELETE",
		"/locks/%2E":    "GET, HEAD, POST, PATCH, DELETE",
		"/healthz":      "GET, HEAD",
		"/readyz":       "GET, HEAD",
		"/metrics":      "GET, HEAD",
		"/openapi.yaml": "GET, HEAD",
	} {
		for _, m := range []string{http.MethodPut, http.MethodOptions} {
			req, err := http.NewRequest(m, base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.ProtoMajor != proto {
				t.Fatalf("%s %s: answered over %s, want HTTP/%d", m, path, res.Proto, proto)
			}
			if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != exp {
				t.Errorf("HTTP/%d %s %s: %d, Allow %q; want 405, Allow %q", proto, m, path, res.StatusCode, res.Header.Get("Allow"), exp)
			}
		}
	}
}

// TestContractHTTP2: on a gateway serving HTTPS, HEAD and the Allow of a 405
// behave over HTTP/2 as over HTTP/1.1 (openapi.yaml info.description
// "Behaviour where the specification is silent").
func TestContractHTTP2(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, "gateway")
	g := startUnready(t, nodes, "--tls-cert", certFile, "--tls-key", keyFile)
	base := strings.Replace(g.URL, "http://", "https://", 1)
	// Each client has its own config: a Transport adds "h2" to its
	// config's NextProtos.
	newClient := func(h2 bool) *http.Client {
		conf := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: h2}}
	}
	waitReadyWith(t, newClient(false), base, g)
	held := resourceName(t)
	wantStatus(t, doWith(t, newClient(false), http.MethodPost, base+"/locks/"+held, `{"ttl_ms":30000}`), http.StatusCreated)

	for proto, c := range map[int]*http.Client{1: newClient(false), 2: newClient(true)} {
		t.Run(fmt.Sprintf("HTTP%d", proto), func(t *testing.T) {
			wantAllow(t, c, base, proto)
			for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml", "/metrics", "/locks/" + held,
				"/locks/" + resourceName(t), "/locks/%2E", "/nope"} {
				get := doWith(t, c, http.MethodGet, base+path, "")
				req, err := http.NewRequest(http.MethodHead, base+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				res, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || len(body) != 0 {
					t.Errorf("HEAD %s: body %q, %v", path, body, err)
				}
				if res.ProtoMajor != proto {
					t.Fatalf("HEAD %s: answered over %s, want HTTP/%d", path, res.Proto, proto)
				}
				if res.StatusCode != get.Status || res.Header.Get("Content-Type") != get.Header.Get("Content-Type") {
					t.Errorf("HTTP/%d HEAD %s: %d %q; GET %d %q", proto, path, res.StatusCode,
						res.Header.Get("Content-Type"), get.Status, get.Header.Get("Content-Type"))
				}
			}
		})
	}
}

// TestOptionsAsterisk: `OPTIONS *` (a request for the server as a whole) is
// answered as any request whose path names no route: a 4xx problem with an
// X-Request-Id, not net/http's bare 200 (openapi.yaml info.description
// "Conventions").
func TestOptionsAsterisk(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, startCluster(t, 1))
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(gw.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprint(conn, "OPTIONS * HTTP/1.1\r\nHost: redlockd\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 400 || resp.StatusCode >= 500 || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("OPTIONS * answered %d, Content-Type %q, X-Request-Id %q; want a 4xx problem with a request id",
			resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("X-Request-Id"))
	}
}
