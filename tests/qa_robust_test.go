package tests

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestZeroTTLFlags: --default-ttl 0 and --max-ttl 0 are refused (exit 64), as
// --max-wait 0 is, instead of starting with the library's defaults while the
// start-up log says 0s.
func TestZeroTTLFlags(t *testing.T) {
	for _, flag := range []string{"--default-ttl", "--max-ttl"} {
		t.Run(flag, func(t *testing.T) {
			p := runProc(t, nil, "serve", "--listen", "127.0.0.1:0", flag, "0")
			p.wantExit(64, 10*time.Second)
			if want := flag + " 0s must be positive"; !strings.Contains(p.errs.String(), want) {
				t.Errorf("stderr does not say %q:\n%s", want, p.errs.String())
			}
		})
	}
}

// TestOptionsAsterisk: `OPTIONS *` (a request for the server as a whole) is
// answered by the API like any other path that names no route: a problem
// with an X-Request-Id, not net/http's bare 200.
func TestOptionsAsterisk(t *testing.T) {
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

// TestWriterGoneLetsReadersIn: a writer that waits behind readers keeps new
// readers out (SPEC §8), but only while it waits: once its client is gone,
// a new reader gets the lock at once, not when the writer's wait would have
// ended; so for a writer of several resources.
func TestWriterGoneLetsReadersIn(t *testing.T) {
	gw := startGateway(t, startCluster(t, 3))
	for _, multi := range []bool{false, true} {
		res := resourceName(t)
		wantStatus(t, acquire(t, gw, res, `{"mode":"read","ttl_ms":20000}`), http.StatusCreated)
		path, body := "/locks/"+res, `{"wait_ms":15000}`
		if multi {
			path, body = "/locks", multiBody([]string{res, res + ".b"}, `,"wait_ms":15000`)
		}
		c := &http.Client{Timeout: 500 * time.Millisecond} // gives up, and closes the connection
		if _, err := c.Post(gw.URL+path, "application/json", strings.NewReader(body)); err == nil {
			t.Fatalf("the waiting writer (multi %v) got an answer within 500ms", multi)
		}
		eventually(t, 5*time.Second, "the writer out of the queue", func() bool {
			return scrapeMetrics(t, gw).value("redlockd_waiters") == 0
		})
		eventually(t, 5*time.Second, "a new reader admitted (multi "+fmt.Sprint(multi)+")", func() bool {
			return acquire(t, gw, res, `{"mode":"read"}`).Status == http.StatusCreated
		})
	}
}
