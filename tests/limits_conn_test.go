package tests

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// idleConn is a client connection that sent one GET /healthz, got its
// answer and stays open, idle, as keep-alive connections do.
type idleConn struct {
	net.Conn
	br *bufio.Reader
}

// openIdle opens an idle connection to addr; it fails the test if the
// gateway does not answer within 5s.
func openIdle(t *testing.T, addr string, i int) *idleConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("connection %d: %v", i, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ic := &idleConn{Conn: c, br: bufio.NewReader(c)}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: redlockd\r\n\r\n"); err != nil {
		t.Fatalf("connection %d: %v", i, err)
	}
	resp, err := http.ReadResponse(ic.br, nil)
	if err != nil {
		t.Fatalf("connection %d got no answer to GET /healthz: %v (the gateway stopped accepting?)", i, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("connection %d: GET /healthz %d", i, resp.StatusCode)
	}
	_ = c.SetDeadline(time.Time{})
	return ic
}

// closedByServer reports whether the gateway closed c (within 5s).
func (c *idleConn) closedByServer() bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestMaxConnections checks that idle keep-alive connections cannot take
// the gateway off the air: with more of them open than the cap on client
// connections, a new client's /healthz and acquire are answered at once,
// the connections idle the longest having been closed to make room, and
// reaching the cap is logged once (not net/http's "Accept error: too many
// open files" every second). The cap is --max-connections, or, by default,
// lowered to fit the open-files limit: under `ulimit -n 400`, a gateway
// without a cap stops accepting once 400 connections are open.
func TestMaxConnections(t *testing.T) {
	nodes := startCluster(t, 3)
	args := []string{"serve", "--listen", "127.0.0.1:0", "--redis", redisURLs(nodes), "--restart-quarantine", "off"}

	for _, tc := range []struct {
		name  string
		wrap  []string
		flags []string
		conns int
	}{
		{"OpenFilesLimit", []string{"sh", "-c", `ulimit -n 400 && exec "$0" "$@"`}, nil, 450},
		{"Flag", nil, []string{"--max-connections", "50"}, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := startWrapped(t, tc.wrap, nil, append(args, tc.flags...)...)
			gw.waitReady(t)
			addr := strings.TrimPrefix(gw.URL, "http://")
			conns := make([]*idleConn, tc.conns)
			for i := range conns {
				conns[i] = openIdle(t, addr, i)
			}

			// A new client is served at once.
			fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
			defer fresh.CloseIdleConnections()
			for _, req := range []struct{ method, path string }{
				{http.MethodGet, "/healthz"},
				{http.MethodPost, "/locks/" + resourceName(t)},
			} {
				r, err := newRequest(gw.URL+req.path, req.method, "")
				if err != nil {
					t.Fatal(err)
				}
				resp, err := sendWith(fresh, r)
				if err != nil {
					t.Fatalf("a new client: %v", err)
				}
				if resp.Status >= 300 || resp.Elapsed > 2*time.Second {
					t.Errorf("a new client: %v in %v", resp, resp.Elapsed)
				}
			}
			if !conns[0].closedByServer() {
				t.Error("the connection idle the longest is still open")
			}

			// The log reaches the test through a pipe: await the line.
			eventually(t, 5*time.Second, "the connection limit logged", func() bool {
				return strings.Contains(gw.Stderr(), `"connection limit reached`)
			})
			log := gw.Stderr()
			if n := strings.Count(log, `"connection limit reached`); n != 1 {
				t.Errorf("%d log lines say the connection limit was reached, want 1", n)
			}
			if i := strings.Index(log, "Accept error"); i >= 0 {
				t.Error("the gateway ran out of open files: " + tail(log[max(i-300, 0):], 3))
			}
			if tc.wrap != nil && !strings.Contains(log, "lowered to") {
				t.Error("no log line says --max-connections was lowered to fit the open-files limit")
			}
		})
	}
}
