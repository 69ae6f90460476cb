package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// limitedServer serves h on 127.0.0.1:0 with a connLimiter of max
// connections that logs to log, and returns its address and limiter.
func limitedServer(t *testing.T, max int, log io.Writer, h http.Handler) (string, *connLimiter) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnLimiter(ln, max, zerolog.New(log))
	// The header timeout outlasts the tests: only the limiter closes
	// connections that send no request.
	srv := &http.Server{Handler: h, ConnState: l.ConnState, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), l
}

// keepAlive is a client connection that sends GET requests on one
// connection.
type keepAlive struct {
	net.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &keepAlive{Conn: c, br: bufio.NewReader(c)}
}

// get sends GET path and returns the status, or an error if the
// connection was closed or gave no answer within 5s.
func (k *keepAlive) get(path string) (int, error) {
	_ = k.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(k, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// closed reports whether the server closed k (within 5s).
func (k *keepAlive) closed() bool {
	_ = k.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := k.br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// waitQueues waits until l counts fresh connections that have not
// completed a request and idle ones.
func waitQueues(t *testing.T, l *connLimiter, fresh, idle int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		f, i := l.fresh.Len(), l.idle.Len()
		l.mu.Unlock()
		if f == fresh && i == idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections fresh and %d idle, want %d and %d", f, i, fresh, idle)
		}
	}
}

// TestConnLimitIdle checks that at the cap a new connection closes the one
// idle the longest, and that reaching the cap is logged once.
func TestConnLimitIdle(t *testing.T) {
	var log logBuffer
	addr, l := limitedServer(t, 3, &log, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var conns []*keepAlive
	for i := range 10 {
		k := dialKeepAlive(t, addr)
		if code, err := k.get("/"); err != nil || code != 200 {
			t.Fatalf("connection %d: %d, %v", i, code, err)
		}
		conns = append(conns, k)
		waitQueues(t, l, 0, min(i+1, 3)) // the server marks it idle after the client has its answer
	}
	// The first 7 were closed to make room, the last 3 still serve.
	for i, k := range conns {
		if i < 7 {
			if !k.closed() {
				t.Errorf("connection %d still open", i)
			}
			continue
		}
		if code, err := k.get("/"); err != nil || code != 200 {
			t.Errorf("connection %d: %d, %v", i, code, err)
		}
	}
	if n := strings.Count(log.String(), "connection limit reached"); n != 1 {
		t.Errorf("%d lines say the limit was reached, want 1:\n%s", n, log.String())
	}
}

// TestConnLimitFreshFirst checks that at the cap a new connection closes the
// oldest that has not completed a request (silent, or stopped after one
// byte) before the one idle the longest.
func TestConnLimitFreshFirst(t *testing.T) {
	addr, l := limitedServer(t, 3, io.Discard, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	idle := dialKeepAlive(t, addr)
	if code, err := idle.get("/"); err != nil || code != 200 {
		t.Fatalf("idle connection: %d, %v", code, err)
	}
	waitQueues(t, l, 0, 1)
	silent := dialKeepAlive(t, addr)
	waitQueues(t, l, 1, 1)
	slow := dialKeepAlive(t, addr)
	if _, err := io.WriteString(slow, "G"); err != nil {
		t.Fatal(err)
	}
	waitQueues(t, l, 2, 1)

	var served []*keepAlive
	for i, victim := range []struct {
		name string
		k    *keepAlive
	}{{"silent", silent}, {"one byte", slow}, {"idle", idle}} {
		k := dialKeepAlive(t, addr)
		if code, err := k.get("/"); err != nil || code != 200 {
			t.Fatalf("new connection %d: %d, %v", i, code, err)
		}
		served = append(served, k)
		if !victim.k.closed() {
			t.Fatalf("new connection %d did not close the %s one", i, victim.name)
		}
	}
	for i, k := range served {
		if code, err := k.get("/"); err != nil || code != 200 {
			t.Errorf("new connection %d, again: %d, %v", i, code, err)
		}
	}
}

// TestConnLimitBusy checks that at the cap with no idle connection a new
// connection is closed at once, and is served again once a slot is free.
func TestConnLimitBusy(t *testing.T) {
	var log logBuffer
	entered := make(chan struct{})
	release := make(chan struct{})
	addr, l := limitedServer(t, 2, &log, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-release
		}
	}))
	var wg sync.WaitGroup
	busy := []*keepAlive{dialKeepAlive(t, addr), dialKeepAlive(t, addr)}
	for _, k := range busy {
		wg.Go(func() {
			if code, err := k.get("/block"); err != nil || code != 200 {
				t.Errorf("blocked request: %d, %v", code, err)
			}
		})
		<-entered
	}
	start := time.Now()
	if code, err := dialKeepAlive(t, addr).get("/"); err == nil {
		t.Errorf("a third connection was served (%d) with 2 busy and a cap of 2", code)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("refusing took %v", d)
	}
	close(release)
	wg.Wait()
	// Once both are idle, a new connection takes the place of one.
	waitQueues(t, l, 0, 2)
	if code, err := dialKeepAlive(t, addr).get("/"); err != nil || code != 200 {
		t.Errorf("after the busy ones finished: %d, %v", code, err)
	}
	if n := strings.Count(log.String(), "connection limit reached"); n != 1 {
		t.Errorf("%d lines say the limit was reached, want 1:\n%s", n, log.String())
	}
}

// TestConnLimitFromRlimit checks that the cap leaves room under the
// open-files limit.
func TestConnLimitFromRlimit(t *testing.T) {
	limit, nofile := connLimit(1<<30, 5, false)
	if nofile == 0 {
		// No finite open-files limit: the cap asked for stands.
		if limit != 1<<30 {
			t.Errorf("cap %d without an open-files limit, want the one asked for", limit)
		}
		return
	}
	if limit <= 0 || uint64(limit) >= nofile {
		t.Errorf("cap %d with an open-files limit of %d", limit, nofile)
	}
	if got, _ := connLimit(10, 5, false); got != 10 {
		t.Errorf("a small cap was changed to %d", got)
	}
}
