package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
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

// TestMaxConnections: idle keep-alive connections cannot take the gateway off
// the air: with more of them open than the cap on client connections, a new
// client's /healthz and acquire are answered at once, the connections idle
// the longest having been closed to make room, and reaching the cap is logged
// once (not net/http's "Accept error: too many open files" every second). The
// cap is --max-connections or, by default, lowered to fit the open-files
// limit: under `ulimit -n 400`, a gateway without a cap would stop accepting
// once 400 connections are open (docs/configuration.md "Configuration":
// --max-connections; docs/operations.md "Scaling the gateway horizontally":
// connections).
func TestMaxConnections(t *testing.T) {
	t.Parallel()
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

// TestSilentConnectionsDoNotLockOut: connections that never finish a request
// cannot keep others out: while an attacker keeps more connections open than
// --max-connections, silent ones and ones that sent one byte of a request
// line, re-opening each as the gateway closes it, at least 95 % of the
// /healthz probes (each on a new connection, as a load balancer's) and of
// another client's authenticated acquires and releases are answered
// (docs/operations.md "Scaling the gateway horizontally": connections).
func TestSilentConnectionsDoNotLockOut(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	const maxConns, attackers, probeFor = 200, 250, 10 * time.Second
	needOpenFiles(t, 4*attackers)
	nodes := startCluster(t, 3)
	key := keygen(t, "app", "app")
	// The attack loads the machine: a generous node timeout keeps the
	// nodes' answers out of what is counted.
	gw := startGateway(t, nodes, "--max-connections", strconv.Itoa(maxConns), "--api-keys-file", keysFile(t, key),
		"--node-timeout", "1s")
	addr := strings.TrimPrefix(gw.URL, "http://")

	attack, stop := context.WithCancel(context.Background())
	var opened atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for i := range attackers {
		wg.Go(func() { holdSilent(attack, addr, i%2 == 1, &opened) })
	}
	eventually(t, 30*time.Second, "the attack reaches the connection cap", func() bool {
		return strings.Contains(gw.Stderr(), `"connection limit reached`)
	})

	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res := resourceName(t)
	var health, locks probeCount
	end := time.Now().Add(probeFor)
	var pwg sync.WaitGroup
	pwg.Go(func() {
		for time.Now().Before(end) {
			health.add(probeStatus(probe, http.StatusOK, gw.URL+"/healthz", http.MethodGet, ""))
			time.Sleep(20 * time.Millisecond)
		}
	})
	pwg.Go(func() {
		for time.Now().Before(end) {
			r, err := probeSend(client, http.StatusCreated, gw.URL+"/locks/"+res, http.MethodPost, `{"ttl_ms":10000}`, bearer(key.Key)...)
			locks.add(err)
			if err == nil {
				tok, _ := r.JSON["token"].(string)
				locks.add(probeStatus(client, http.StatusNoContent, gw.URL+"/locks/"+res, http.MethodDelete, "", append(bearer(key.Key), "Lock-Token", tok)...))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	pwg.Wait()
	stop()
	wg.Wait()

	t.Logf("attack: %d connections opened; /healthz: %v; acquire and release: %v", opened.Load(), &health, &locks)
	if opened.Load() < 2*maxConns {
		t.Errorf("the attack opened only %d connections: the gateway did not close the silent ones", opened.Load())
	}
	for what, c := range map[string]*probeCount{"/healthz probes": &health, "acquires and releases": &locks} {
		if c.n < 20 || c.ok*100 < 95*c.n {
			t.Errorf("%s: %v, want at least 20 and 95 %% answered", what, c)
		}
	}
}

// holdSilent keeps a connection to addr open that never completes a
// request, opening a new one whenever the gateway closes it, until ctx
// ends; with oneByte each sends the first byte of a request line and
// stops. It counts the connections opened.
func holdSilent(ctx context.Context, addr string, oneByte bool, opened *atomic.Int64) {
	var d net.Dialer
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue
		}
		opened.Add(1)
		stop := context.AfterFunc(ctx, func() { _ = c.Close() })
		if oneByte {
			_, _ = c.Write([]byte("G"))
		}
		_, _ = io.Copy(io.Discard, c) // until the gateway closes it
		stop()
		_ = c.Close()
	}
}

// probeCount counts the requests sent and those answered as expected, and
// keeps the first failures.
type probeCount struct {
	mu     sync.Mutex
	n, ok  int
	failed []string
}

func (c *probeCount) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if err == nil {
		c.ok++
	} else if len(c.failed) < 3 {
		c.failed = append(c.failed, err.Error())
	}
}

func (c *probeCount) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d of %d answered (failures: %q)", c.ok, c.n, c.failed)
}

// probeSend sends method url through c and returns the response, or an
// error unless it has status want.
func probeSend(c *http.Client, want int, url, method, body string, hdr ...string) (*Resp, error) {
	req, err := newRequest(url, method, body, hdr...)
	if err != nil {
		return nil, err
	}
	r, err := sendWith(c, req)
	if err == nil && r.Status != want {
		err = fmt.Errorf("%v, want %d", r, want)
	}
	return r, err
}

// probeStatus is probeSend without the response.
func probeStatus(c *http.Client, want int, url, method, body string, hdr ...string) error {
	_, err := probeSend(c, want, url, method, body, hdr...)
	return err
}

// needOpenFiles raises the test process's open-files limit to its hard
// limit and skips the test unless n files can be open.
func needOpenFiles(t *testing.T, n uint64) {
	t.Helper()
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			t.Fatal(err)
		}
	}
	if r.Cur < n {
		t.Fatalf("open-files limit %d, the test needs %d: raise the hard limit (ulimit -Hn) where the suite runs", r.Cur, n)
	}
}
