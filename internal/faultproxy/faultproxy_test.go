package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// echo starts a TCP echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back, within limit; it returns how long
// that took.
func roundTrip(t *testing.T, c net.Conn, msg []byte, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetDeadline(start.Add(limit))
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read back %d bytes: %v", len(msg), err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("echo differs")
	}
	return time.Since(start)
}

// wantNoAnswer checks that c answers nothing within d (a timeout, not an
// error).
func wantNoAnswer(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read = %d, %v; want a timeout", n, err)
	}
}

// wantBroken checks that reading c fails (reset or EOF) within d.
func wantBroken(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read = %d, %v; want the connection broken", n, err)
	}
}

// wantRefused checks that a new connection through p fails within d: at
// dial (reset during the handshake) or at the first read.
func wantRefused(t *testing.T, p *Proxy, d time.Duration) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), d)
	if err != nil {
		return
	}
	defer c.Close()
	wantBroken(t, c, d)
}

func TestForward(t *testing.T) {
	p := start(t, echo(t))
	if p.Target() == "" || !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("addr %q target %q", p.Addr(), p.Target())
	}
	c := dial(t, p)
	roundTrip(t, c, []byte("hello"), time.Second)
	big := bytes.Repeat([]byte("0123456789"), 100_000) // 1 MB, more than the queues hold
	go func() { _, _ = c.Write(big) }()
	got := make([]byte, len(big))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("1 MB echo: %v", err)
	}
	if p.Conns() != 1 || p.Accepted() != 1 {
		t.Fatalf("conns %d accepted %d", p.Conns(), p.Accepted())
	}
}

func TestLatency(t *testing.T) {
	const lat = 150 * time.Millisecond
	p := start(t, echo(t))
	c := dial(t, p)
	roundTrip(t, c, []byte("warm"), time.Second)
	for _, tc := range []struct {
		name     string
		up, down time.Duration
	}{
		{"up", lat, 0},
		{"down", 0, lat},
		{"both", lat, lat},
	} {
		p.SetLatencies(tc.up, tc.down)
		el := roundTrip(t, c, []byte(tc.name), 5*time.Second)
		want := tc.up + tc.down
		if el < want || el > want+time.Second {
			t.Errorf("%s: round trip %v, want about %v", tc.name, el, want)
		}
	}
	p.SetLatency(0)
	if el := roundTrip(t, c, []byte("fast"), time.Second); el > lat {
		t.Errorf("latency removed: round trip %v", el)
	}
}

func TestBandwidth(t *testing.T) {
	const bw = 200_000 // bytes/s
	p := start(t, echo(t))
	c := dial(t, p)
	p.SetBandwidth(bw)
	msg := bytes.Repeat([]byte("x"), bw/2) // 0.5 s each way, pipelined
	el := roundTrip(t, c, msg, 10*time.Second)
	if el < 450*time.Millisecond || el > 3*time.Second {
		t.Errorf("%d bytes at %d B/s echoed in %v, want about 0.5 s", len(msg), bw, el)
	}
	p.SetBandwidth(0)
	if el := roundTrip(t, c, msg, 5*time.Second); el > 300*time.Millisecond {
		t.Errorf("unlimited: %v", el)
	}
}

func TestCutAndRestore(t *testing.T) {
	p := start(t, echo(t))
	c := dial(t, p)
	roundTrip(t, c, []byte("before"), time.Second)
	p.Cut()
	wantBroken(t, c, time.Second)
	// New connections are accepted and reset at once.
	wantRefused(t, p, time.Second)
	p.Restore()
	e := dial(t, p)
	roundTrip(t, e, []byte("after"), time.Second)
}

func TestBlackhole(t *testing.T) {
	p := start(t, echo(t))
	c := dial(t, p)
	roundTrip(t, c, []byte("before"), time.Second)
	p.Blackhole()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	wantNoAnswer(t, c, 200*time.Millisecond)
	n := dial(t, p) // new connections hang too
	if _, err := n.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	wantNoAnswer(t, n, 100*time.Millisecond)
	p.Restore()
	// What was sent meanwhile arrives, in order.
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("held data: %q, %v", got, err)
	}
	roundTrip(t, c, []byte("after"), time.Second)
	_ = n.SetReadDeadline(time.Now().Add(time.Second))
	got = make([]byte, 3)
	if _, err := io.ReadFull(n, got); err != nil || string(got) != "new" {
		t.Fatalf("new connection's held data: %q, %v", got, err)
	}
}

func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := start(t, dead)
	wantRefused(t, p, time.Second)
}

// TestTargetCloses: when the target closes (a restarted server), the client
// sees its connection end.
func TestTargetCloses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("bye"))
			c.Close()
		}
	}()
	p := start(t, ln.Addr().String())
	c := dial(t, p)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	b, err := io.ReadAll(c)
	if string(b) != "bye" || err != nil {
		t.Fatalf("read %q, %v; want bye then EOF", b, err)
	}
}

// awaitGoroutines waits up to 2s for no goroutine started by a proxy.
func awaitGoroutines(t *testing.T, what string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); goroutines() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %d left", what, goroutines())
		}
	}
}

// goroutines counts the goroutines the proxy started (not the test's echo
// server).
func goroutines() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	s := string(buf[:n])
	return strings.Count(s, "created by github.com/redlockd/redlockd/internal/faultproxy.(*Proxy)") +
		strings.Count(s, "created by github.com/redlockd/redlockd/internal/faultproxy.Start")
}

// TestCloseLeavesNothing: Close, with connections open, blackholed and with
// data in flight, returns after every goroutine of the proxy ended.
func TestCloseLeavesNothing(t *testing.T) {
	// A goroutine that has done its last deferred call may still be on its
	// way out, so the counts are awaited: the earlier tests' proxies are
	// closed, and their goroutines end, as must this one's.
	awaitGoroutines(t, "the earlier tests' proxy goroutines to end")
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	roundTrip(t, c, []byte("x"), time.Second)
	p.SetLatency(time.Hour)
	_, _ = c.Write([]byte("in flight"))
	d := dial(t, p)
	p.Blackhole()
	_, _ = d.Write([]byte("held"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	wantBroken(t, c, time.Second)
	awaitGoroutines(t, "no proxy goroutine left after Close")
	if _, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("closed proxy still accepts")
	}
}
