package tests

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const readBody = `{"mode":"read","ttl_ms":30000}`

// wantMode checks the mode of an acquire or extend answer and its fence.
func wantMode(t testing.TB, r *Resp, mode string, fence int64) {
	t.Helper()
	if got := r.str(t, "mode"); got != mode || r.num(t, "fencing_token") != fence {
		t.Errorf("%s %s: mode %q, fence %d; want %q, %d", r.Method, r.Path, got, r.num(t, "fencing_token"), mode, fence)
	}
}

// wantReaders checks that inspect shows the lock held by n readers with
// fence, and no token.
func wantReaders(t testing.TB, g *Gateway, res string, n, fence int64, token string) {
	t.Helper()
	info := inspect(t, g, res)
	wantStatus(t, info, http.StatusOK)
	if info.JSON["held"] != true || info.str(t, "mode") != "read" || info.num(t, "readers") != n || info.num(t, "fencing_token") != fence {
		t.Errorf("inspect: %s; want held by %d readers with fence %d", info.Body, n, fence)
	}
	wantNoSecret(t, info, token)
}

// TestRWLocks: readers share a lock and get the last writer's fence, a
// writer is refused while they hold it and woken by the last release, a
// waiting writer keeps new readers out, a bad mode is 400, a reader's
// client token is idempotent, and extend and release find the token as a
// reader (docs/read-write-locks.md "Read-write locks"; openapi.yaml
// /locks/{resource}). One gateway over five nodes; every request is checked
// against openapi.yaml.
func TestRWLocks(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, startCluster(t, 5))

	// A token that does not hold a lock held by readers is told that others
	// hold it (held-by-other), not that nobody does; once they left, expired.
	t.Run("StrangerToReaders", func(t *testing.T) {
		res := resourceName(t)
		r1 := lock(t, gw, res, readBody)
		stranger := "stranger-token-0123456789"
		for _, r := range []*Resp{release(t, gw, res, stranger), extend(t, gw, res, stranger, "")} {
			wantProblem(t, r, http.StatusConflict, "not-owner")
			if got := r.str(t, "lock_state"); got != "held-by-other" {
				t.Errorf("lock_state %q, want held-by-other: %s", got, r.Body)
			}
		}
		wantStatus(t, release(t, gw, res, r1.str(t, "token")), http.StatusNoContent)
		if got := release(t, gw, res, stranger).str(t, "lock_state"); got != "expired" {
			t.Errorf("after the readers left: lock_state %q, want expired", got)
		}
	})

	t.Run("ReadersShare", func(t *testing.T) {
		res := resourceName(t)
		w0 := lock(t, gw, res, `{"mode":"write"}`)
		wantMode(t, w0, "write", w0.num(t, "fencing_token"))
		fence := w0.num(t, "fencing_token")
		wantStatus(t, release(t, gw, res, w0.str(t, "token")), http.StatusNoContent)

		r1, r2 := lock(t, gw, res, readBody), lock(t, gw, res, `{"mode":"read","owner":"second"}`)
		wantMode(t, r1, "read", fence)
		wantMode(t, r2, "read", fence)
		if r1.Header.Get("Location") != "/locks/"+res || r1.str(t, "token") == r2.str(t, "token") {
			t.Errorf("readers: Location %q, tokens distinct %v", r1.Header.Get("Location"), r1.str(t, "token") != r2.str(t, "token"))
		}
		wantCount(t, r2, "locked_nodes", 3, 5)
		wantReaders(t, gw, res, 2, fence, r1.str(t, "token"))

		held := acquire(t, gw, res, "")
		wantProblem(t, held, http.StatusConflict, "lock-held")
		if retryAfter(t, held) < 1 {
			t.Errorf("writer refused by readers: Retry-After %q", held.Header.Get("Retry-After"))
		}
		wantNoSecret(t, held, r1.str(t, "token"))

		// A reader extends and releases as a writer does; the others stay.
		e := extend(t, gw, res, r1.str(t, "token"), `{"ttl_ms":20000}`)
		wantStatus(t, e, http.StatusOK)
		wantMode(t, e, "read", fence)
		if e.str(t, "token") != r1.str(t, "token") || e.num(t, "ttl_ms") != 20000 {
			t.Errorf("reader's extend: %s", e.Body)
		}
		wantStatus(t, release(t, gw, res, r1.str(t, "token")), http.StatusNoContent)
		wantStatus(t, release(t, gw, res, r1.str(t, "token")), http.StatusNoContent) // idempotent
		wantProblem(t, extend(t, gw, res, r1.str(t, "token"), ""), http.StatusConflict, "not-owner")
		wantReaders(t, gw, res, 1, fence, r2.str(t, "token"))
		wantStatus(t, release(t, gw, res, r2.str(t, "token")), http.StatusNoContent)
		wantNotHeld(t, inspectAnswered(t, gw, res))

		w1 := lock(t, gw, res, "")
		if w1.str(t, "mode") != "write" || w1.num(t, "fencing_token") <= fence {
			t.Errorf("writer after the readers: %s; want mode write, a fence above %d", w1.Body, fence)
		}
		wantStatus(t, release(t, gw, res, w1.str(t, "token")), http.StatusNoContent)
	})

	// A writer that waits keeps new readers out and is woken by the last
	// reader's release (the poll interval is 30s); after its turn readers
	// enter with its fence.
	t.Run("WaitingWriter", func(t *testing.T) {
		res := resourceName(t)
		r1 := lock(t, gw, res, readBody)
		type answer struct {
			r   *Resp
			err error
			at  time.Time
		}
		got := make(chan answer, 1)
		go func() {
			r, err := gw.try(http.MethodPost, "/locks/"+res, `{"ttl_ms":30000,"wait_ms":20000,"owner":"writer"}`)
			got <- answer{r, err, time.Now()}
		}()
		eventually(t, 20*time.Second, "the waiting writer keeps a new reader out", func() bool {
			r := acquire(t, gw, res, `{"mode":"read","ttl_ms":1000}`)
			if r.Status == http.StatusCreated { // the writer is not waiting yet
				wantStatus(t, release(t, gw, res, r.str(t, "token")), http.StatusNoContent)
			}
			return r.Status == http.StatusConflict
		})
		wantProblem(t, acquire(t, gw, res, readBody), http.StatusConflict, "lock-held")
		wantReaders(t, gw, res, 1, r1.num(t, "fencing_token"), r1.str(t, "token"))

		released := time.Now()
		wantStatus(t, release(t, gw, res, r1.str(t, "token")), http.StatusNoContent)
		var a answer
		select {
		case a = <-got:
		case <-time.After(25 * time.Second):
			t.Fatal("the waiting writer got no answer")
		}
		if a.err != nil {
			t.Fatal(a.err)
		}
		wantStatus(t, a.r, http.StatusCreated)
		if d := a.at.Sub(released); d > 5*time.Second {
			t.Errorf("writer served %v after the last reader left: polled, not woken", d)
		}
		w := a.r
		if w.str(t, "mode") != "write" || w.num(t, "fencing_token") <= r1.num(t, "fencing_token") {
			t.Errorf("writer: %s; want mode write, a fence above the reader's %d", w.Body, r1.num(t, "fencing_token"))
		}
		wantProblem(t, acquire(t, gw, res, readBody), http.StatusConflict, "lock-held")
		if info := inspect(t, gw, res); info.str(t, "mode") != "write" || info.num(t, "readers") != 0 || info.str(t, "owner") != "writer" {
			t.Errorf("inspect while the writer holds: %s", info.Body)
		}
		wantStatus(t, release(t, gw, res, w.str(t, "token")), http.StatusNoContent)
		r2 := lock(t, gw, res, readBody)
		wantMode(t, r2, "read", w.num(t, "fencing_token"))
		wantStatus(t, release(t, gw, res, r2.str(t, "token")), http.StatusNoContent)
	})

	// A mode other than "read" or "write" is 400 and takes nothing, also
	// with readers holding the lock.
	t.Run("BadMode", func(t *testing.T) {
		res := resourceName(t)
		for _, body := range []string{`{"mode":"READ"}`, `{"mode":"Write"}`, `{"mode":1}`, `{"mode":""}`, `{"mode":["read"]}`} {
			wantProblem(t, acquire(t, gw, res, body), http.StatusBadRequest, "invalid-request")
		}
		wantNotHeld(t, inspectAnswered(t, gw, res))
		r := lock(t, gw, res, readBody)
		wantProblem(t, acquire(t, gw, res, `{"mode":"shared"}`), http.StatusBadRequest, "invalid-request")
		wantReaders(t, gw, res, 1, r.num(t, "fencing_token"), r.str(t, "token"))
		wantStatus(t, release(t, gw, res, r.str(t, "token")), http.StatusNoContent)
	})

	// A reader's client-chosen token makes its acquire idempotent: the same
	// lock again, counted once.
	t.Run("IdempotentReader", func(t *testing.T) {
		res, token := resourceName(t), clientToken(t)
		body := `{"mode":"read","ttl_ms":30000,"token":"` + token + `"}`
		a, b := lock(t, gw, res, body), lock(t, gw, res, body)
		for _, k := range []string{"resource", "token", "mode"} {
			if a.str(t, k) != b.str(t, k) {
				t.Errorf("%s: %q then %q", k, a.str(t, k), b.str(t, k))
			}
		}
		if a.num(t, "fencing_token") != b.num(t, "fencing_token") || a.num(t, "ttl_ms") != b.num(t, "ttl_ms") {
			t.Errorf("the same reader token twice: %s then %s", a.Body, b.Body)
		}
		wantReaders(t, gw, res, 1, a.num(t, "fencing_token"), token)
		wantStatus(t, release(t, gw, res, token), http.StatusNoContent)
		wantNotHeld(t, inspectAnswered(t, gw, res))
	})
}

// TestRWNamespaces: a reader in one namespace does not keep out a writer of
// the same resource in another; in its own namespace it does, and another
// namespace's key cannot release it (openapi.yaml "Authentication and
// namespaces").
func TestRWNamespaces(t *testing.T) {
	t.Parallel()
	a, b := keygen(t, "svc-a", "team-a"), keygen(t, "svc-b", "team-b")
	gw := startGateway(t, startCluster(t, 3), "--api-keys-file", keysFile(t, a, b))
	res := resourceName(t)
	path := "/locks/" + res

	r := gw.do(t, http.MethodPost, path, readBody, bearer(a.Key)...)
	wantStatus(t, r, http.StatusCreated)
	wantProblem(t, gw.do(t, http.MethodPost, path, "", bearer(a.Key)...), http.StatusConflict, "lock-held")
	w := gw.do(t, http.MethodPost, path, "", bearer(b.Key)...)
	wantStatus(t, w, http.StatusCreated)
	if info := gw.do(t, http.MethodGet, path, "", bearer(a.Key)...); info.str(t, "mode") != "read" || info.num(t, "readers") != 1 {
		t.Errorf("team a sees %s, want its reader", info.Body)
	}
	if info := gw.do(t, http.MethodGet, path, "", bearer(b.Key)...); info.str(t, "mode") != "write" {
		t.Errorf("team b sees %s, want its writer", info.Body)
	}
	wantProblem(t, gw.do(t, http.MethodDelete, path, "", append(bearer(b.Key), "Lock-Token", r.str(t, "token"))...), http.StatusConflict, "not-owner")
	wantStatus(t, gw.do(t, http.MethodDelete, path, "", append(bearer(a.Key), "Lock-Token", r.str(t, "token"))...), http.StatusNoContent)
	wantStatus(t, gw.do(t, http.MethodDelete, path, "", append(bearer(b.Key), "Lock-Token", w.str(t, "token"))...), http.StatusNoContent)
}

// TestRWWriterGoneLetsReadersIn: a writer that waits behind readers keeps new
// readers out only while it waits: once its client is gone, a new reader
// gets the lock at once, not when the writer's wait would have ended; so for
// a writer of several resources (docs/read-write-locks.md "No writer starvation").
func TestRWWriterGoneLetsReadersIn(t *testing.T) {
	t.Parallel()
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

// TestRWCancelledWriterLetsReadersIn: a waiting writer whose client leaves
// in the middle of one of its rounds leaves the wwait sets for good: the
// round's refusals, answered after the gateway removed the writer, must not
// put it back and keep new readers out for the rest of its wait
// (docs/read-write-locks.md "No writer starvation").
func TestRWCancelledWriterLetsReadersIn(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, startCluster(t, 3), "--max-wait", "10s")
	res := resourceName(t)
	lock(t, gw, res, `{"mode":"read","ttl_ms":30000}`)
	cl := &http.Client{Timeout: 150 * time.Millisecond}
	for i := range 10 {
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				req, err := newRequest(gw.URL+"/locks/"+res, http.MethodPost, `{"wait_ms":10000}`)
				if err != nil {
					t.Error(err)
					return
				}
				if r, err := sendWith(cl, req); err == nil {
					t.Errorf("a writer was answered while a reader holds the lock: %s", r)
				}
			})
		}
		wg.Wait()
		eventually(t, 5*time.Second, "the writers gone", func() bool { return scrapeMetrics(t, gw).value("redlockd_waiters") == 0 })
		eventually(t, 2*time.Second, fmt.Sprintf("round %d: a new reader let in", i), func() bool {
			r := acquire(t, gw, res, `{"mode":"read","ttl_ms":30000}`)
			return r.Status == http.StatusCreated
		})
	}
}
