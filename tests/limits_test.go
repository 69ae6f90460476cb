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

// TestLimits: each limit of the HTTP server holds on the real binary: a
// client sending its headers slowly is cut off after --read-header-timeout;
// headers of 8 KiB pass and headers well over 16 KiB get 431; a body over 16
// KiB gets 413; --max-waiters bounds the acquires waiting at once (503
// too-many-waiters with Retry-After; acquires that do not wait are not
// limited); and a waiter held longer than the read timeout still gets its
// answer, the write timeout being above --max-wait (docs/configuration.md
// "Configuration": fixed limits, --max-waiters; docs/operations.md
// "Scaling the gateway horizontally").
func TestLimits(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes, "--read-header-timeout", "1s", "--max-waiters", "2", "--max-wait", "10s")
	addr := strings.TrimPrefix(gw.URL, "http://")

	t.Run("SlowHeaders", func(t *testing.T) {
		// From before the dial: the server's deadline runs from when it
		// starts reading the connection, which this goroutine may not see
		// at once on a busy machine.
		start := time.Now()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: redlockd\r\n"); err != nil {
			t.Fatal(err)
		}
		// Keep sending a header line every 100ms, never ending the headers.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := io.WriteString(conn, "X-Slow: y\r\n"); err != nil {
						return
					}
				}
			}
		}()
		_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		n, err := io.Copy(io.Discard, conn) // returns when the server closes
		elapsed := time.Since(start)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server kept a slow client for 15s (%d bytes read)", n)
		}
		if elapsed < 900*time.Millisecond || elapsed > 6*time.Second {
			t.Errorf("slow client cut after %v, want about 1s", elapsed)
		}
		t.Logf("slow client cut after %v (%d bytes, %v)", elapsed.Round(time.Millisecond), n, err)
		// A client that sends its headers at once is served as usual.
		wantStatus(t, gw.do(t, http.MethodGet, "/healthz", ""), http.StatusOK)
	})

	t.Run("HeaderBytes", func(t *testing.T) {
		r := gw.do(t, http.MethodGet, "/healthz", "", "X-Pad", strings.Repeat("p", 8<<10))
		wantStatus(t, r, http.StatusOK)
		req, err := newRequest(gw.URL+"/locks/"+resourceName(t), http.MethodPost, "", "X-Pad", strings.Repeat("p", 24<<10))
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, send(t, req), http.StatusRequestHeaderFieldsTooLarge)
	})

	t.Run("BodyBytes", func(t *testing.T) {
		res := resourceName(t)
		r := acquire(t, gw, res, `{"owner":"`+strings.Repeat("o", 16<<10)+`"}`)
		wantProblem(t, r, http.StatusRequestEntityTooLarge, "payload-too-large")
		wantNotHeld(t, inspectAnswered(t, gw, res))
	})

	t.Run("MaxWaiters", func(t *testing.T) {
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":30000}`).str(t, "token")
		type result struct {
			r   *Resp
			err error
		}
		waiters := make(chan result, 2)
		for range 2 {
			go func() {
				// Longer than the read timeout (1s + 5s): still answered.
				r, err := gw.try(http.MethodPost, "/locks/"+res, `{"wait_ms":10000}`)
				waiters <- result{r, err}
			}()
		}
		eventually(t, 10*time.Second, "2 waiters", func() bool { return scrapeMetrics(t, gw).value("redlockd_waiters") == 2 })

		r := acquire(t, gw, res, `{"wait_ms":5000}`)
		wantProblem(t, r, http.StatusServiceUnavailable, "too-many-waiters")
		if retryAfter(t, r) < 1 {
			t.Errorf("Retry-After %d", retryAfter(t, r))
		}
		wantProblem(t, acquire(t, gw, res, ""), http.StatusConflict, "lock-held") // not waiting: not limited

		// The lock stays held past the read timeout; then each waiter gets it in turn.
		time.Sleep(6500 * time.Millisecond) // no event to wait for: the read timeout must pass
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
		for range 2 {
			select {
			case w := <-waiters:
				if w.err != nil {
					t.Fatalf("waiter: %v (want an answer, not a cut connection)", w.err)
				}
				wantStatus(t, w.r, http.StatusCreated)
				wantStatus(t, release(t, gw, res, w.r.str(t, "token")), http.StatusNoContent)
			case <-time.After(15 * time.Second):
				t.Fatal("a waiter got no answer")
			}
		}
		if m := scrapeMetrics(t, gw); m.value("redlockd_acquisitions_total", "outcome", "too_many_waiters") != 1 {
			t.Errorf("too_many_waiters outcomes: %v", m.value("redlockd_acquisitions_total", "outcome", "too_many_waiters"))
		}
	})

	t.Run("KeepAlive", func(t *testing.T) {
		// Two requests on one connection: keep-alive works with the limits.
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		for range 2 {
			if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: redlockd\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("healthz on a kept-alive connection: %d", resp.StatusCode)
			}
		}
	})
}
