package tests

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	tokenRe    = regexp.MustCompile(`^[A-Za-z0-9_-]{22,128}$`)
	rfc3339Ms  = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)
	defaultTTL = int64(30000)
)

// TestLocks: a lock's calls answer as the contract says, on one gateway over
// five healthy nodes: acquire (201, defaults for an empty body, 409 lock-held
// with Retry-After while held), waiting with wait_ms (served at a release or
// expiry, first come first served, no busy polling, 409 when the wait ends),
// idempotent acquire with a client token, increasing fencing tokens, release
// (204, again when retried, 409 not-owner), extend, inspect, /healthz,
// /readyz, /openapi.yaml and request ids; every subtest uses its own resource
// (openapi.yaml /locks/{resource}; README.md "Using it").
func TestLocks(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes)

	t.Run("Acquire", func(t *testing.T) { testAcquire(t, gw, nodes) })
	t.Run("Wait", func(t *testing.T) { testWait(t, gw, nodes) })
	t.Run("Idempotent", func(t *testing.T) { testIdempotent(t, gw) })
	t.Run("Fencing", func(t *testing.T) { testFencing(t, gw) })
	t.Run("Release", func(t *testing.T) { testRelease(t, gw, nodes) })
	t.Run("Extend", func(t *testing.T) { testExtend(t, gw, nodes) })
	t.Run("Inspect", func(t *testing.T) { testInspect(t, gw) })
	t.Run("Operations", func(t *testing.T) { testOperations(t, gw, nodes) })
}

// checkLockBody checks the 201/200 body of an acquire or extend that was
// sent at start and answered after r.Elapsed, with voting nodes up.
func checkLockBody(t *testing.T, r *Resp, start time.Time, resource string, ttl int64, voting int64) {
	t.Helper()
	if got := r.str(t, "resource"); got != resource {
		t.Errorf("resource %q, want %q", got, resource)
	}
	if tok := r.str(t, "token"); !tokenRe.MatchString(tok) {
		t.Errorf("token %q is not 22–128 chars of [A-Za-z0-9_-]", tok)
	}
	if f := r.num(t, "fencing_token"); f <= 0 {
		t.Errorf("fencing_token %d, want > 0", f)
	}
	if got := r.num(t, "ttl_ms"); got != ttl {
		t.Errorf("ttl_ms %d, want %d", got, ttl)
	}
	validity := r.num(t, "validity_ms")
	// validity = ttl - elapsed - drift, drift = ttl*0.01 + 2ms.
	if maxV := ttl - ttl/100 - 2; validity <= 0 || validity > maxV {
		t.Errorf("validity_ms %d, want in (0, %d] (ttl %d minus drift)", validity, maxV, ttl)
	}
	exp := r.str(t, "expires_at")
	if !rfc3339Ms.MatchString(exp) {
		t.Errorf("expires_at %q is not RFC 3339 UTC with milliseconds", exp)
	}
	at, err := time.Parse(time.RFC3339Nano, exp)
	if err != nil {
		t.Fatalf("expires_at %q: %v", exp, err)
	}
	v := time.Duration(validity) * time.Millisecond
	slack := 100 * time.Millisecond
	if lo, hi := start.Add(v-slack), start.Add(r.Elapsed+v+slack); at.Before(lo) || at.After(hi) {
		t.Errorf("expires_at %s not ≈ now + validity_ms (%v): want within [%s, %s]",
			exp, v, lo.UTC().Format(time.RFC3339Nano), hi.UTC().Format(time.RFC3339Nano))
	}
	if got := r.num(t, "nodes"); got != 5 {
		t.Errorf("nodes %d, want 5", got)
	}
	if got := r.num(t, "quorum"); got != 3 {
		t.Errorf("quorum %d, want 3", got)
	}
	wantCount(t, r, "locked_nodes", 3, voting)
}

func testAcquire(t *testing.T, gw *Gateway, nodes []*RedisNode) {
	t.Run("Created", func(t *testing.T) {
		res := resourceName(t)
		start := time.Now()
		r := lock(t, gw, res, `{"ttl_ms":10000}`)
		if got, want := r.Header.Get("Location"), "/locks/"+res; got != want {
			t.Errorf("Location %q, want %q", got, want)
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
		checkLockBody(t, r, start, res, 10000, 5)
		waitHolders(t, nodes, res, r.str(t, "token"), 5)
	})

	t.Run("EmptyBodyDefaults", func(t *testing.T) {
		res := resourceName(t)
		start := time.Now()
		r := lock(t, gw, res, "")
		checkLockBody(t, r, start, res, defaultTTL, 5)
	})

	t.Run("EmptyBodyNoContentType", func(t *testing.T) {
		res := resourceName(t)
		r := gw.do(t, http.MethodPost, "/locks/"+res, "", "Content-Type", "")
		wantStatus(t, r, http.StatusCreated)
		if got := r.num(t, "ttl_ms"); got != defaultTTL {
			t.Errorf("ttl_ms %d, want %d", got, defaultTTL)
		}
	})

	t.Run("EmptyObject", func(t *testing.T) {
		r := lock(t, gw, resourceName(t), `{}`)
		if got := r.num(t, "ttl_ms"); got != defaultTTL {
			t.Errorf("ttl_ms %d, want %d", got, defaultTTL)
		}
	})

	t.Run("TrailingNewline", func(t *testing.T) {
		// echo and heredocs end bodies with a newline.
		r := lock(t, gw, resourceName(t), "{\"ttl_ms\": 5000}\n")
		if got := r.num(t, "ttl_ms"); got != 5000 {
			t.Errorf("ttl_ms %d, want 5000", got)
		}
	})

	t.Run("BodyAtSizeLimit", func(t *testing.T) {
		body := `{"ttl_ms":5000}`
		body += strings.Repeat(" ", 16*1024-len(body))
		lock(t, gw, resourceName(t), body)
	})

	t.Run("Limits", func(t *testing.T) {
		lock(t, gw, resourceName(t), `{"ttl_ms":100}`)
		lock(t, gw, resourceName(t), `{"ttl_ms":60000}`)
		lock(t, gw, resourceName(t), fmt.Sprintf(`{"owner":%q}`, strings.Repeat("o", 256)))
		lock(t, gw, fmt.Sprintf("%s%010d", strings.Repeat("r", 190), seq.Add(1)), "") // 200 chars
		lock(t, gw, "All.valid:chars-_."+fmt.Sprint(seq.Add(1)), "")
	})

	t.Run("PercentDecodedName", func(t *testing.T) {
		// The name is taken after percent-decoding: a%2Db is a-b.
		res := resourceName(t)
		enc := strings.ReplaceAll(strings.ReplaceAll(res, "-", "%2D"), ".", "%2E")
		a := lock(t, gw, enc, "")
		if got := a.str(t, "resource"); got != res {
			t.Errorf("resource %q, want the decoded %q", got, res)
		}
		if got, want := a.Header.Get("Location"), "/locks/"+res; got != want {
			t.Errorf("Location %q, want %q", got, want)
		}
		wantStatus(t, inspect(t, gw, res), http.StatusOK)
		wantProblem(t, acquire(t, gw, res, ""), http.StatusConflict, "lock-held")
		wantStatus(t, release(t, gw, res, a.str(t, "token")), http.StatusNoContent)
	})

	t.Run("CurlDefaultContentType", func(t *testing.T) {
		// curl -d sends application/x-www-form-urlencoded: 400
		// invalid-request with a hint, and no lock (openapi.yaml,
		// Content-Type: a browser form must not take locks).
		res := resourceName(t)
		r := gw.do(t, http.MethodPost, "/locks/"+res, `{"ttl_ms":5000}`,
			"Content-Type", "application/x-www-form-urlencoded")
		wantProblem(t, r, http.StatusBadRequest, "invalid-request")
		if d := r.str(t, "detail"); !strings.Contains(d, "application/json") || !strings.Contains(d, "--json") {
			t.Errorf("detail %q does not say application/json nor curl's --json", d)
		}
		wantNotHeld(t, inspect(t, gw, res))
	})

	t.Run("Held", func(t *testing.T) {
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":30000}`)
		tok := a.str(t, "token")
		b := acquire(t, gw, res, `{"ttl_ms":1000}`)
		wantProblem(t, b, http.StatusConflict, "lock-held")
		wantNoSecret(t, b, tok)
		if ra := retryAfter(t, b); ra < 1 || ra > 61 {
			t.Errorf("Retry-After %d s for a lock with ~30 s left, want 1..61", ra)
		}
		if ms := b.num(t, "retry_after_ms"); ms <= 0 || ms > 61000 {
			t.Errorf("retry_after_ms %d, want in (0, 61000]", ms)
		}
		// The holder is untouched.
		i := inspect(t, gw, res)
		wantStatus(t, i, http.StatusOK)
		if got, want := i.num(t, "fencing_token"), a.num(t, "fencing_token"); got != want {
			t.Errorf("fencing_token after refused acquire %d, want %d", got, want)
		}
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	})

	t.Run("FreeAfterExpiry", func(t *testing.T) {
		// A TTL of 2 s: the second acquire, at once, must still find the
		// lock held on a busy machine (300 ms did not, once).
		const ttl = 2 * time.Second
		res := resourceName(t)
		start := time.Now()
		a := lock(t, gw, res, fmt.Sprintf(`{"ttl_ms":%d}`, ttl.Milliseconds()))
		wantProblem(t, acquire(t, gw, res, ""), http.StatusConflict, "lock-held")
		var b *Resp
		eventually(t, ttl+10*time.Second, "lock free after its TTL", func() bool {
			b = acquire(t, gw, res, `{"ttl_ms":5000}`)
			if b.Status == http.StatusConflict {
				return false
			}
			wantStatus(t, b, http.StatusCreated)
			return true
		})
		if since := time.Since(start); since < ttl-10*time.Millisecond {
			t.Errorf("second holder got the lock %v after the first asked for %v", since, ttl)
		}
		if f0, f1 := a.num(t, "fencing_token"), b.num(t, "fencing_token"); f1 <= f0 {
			t.Errorf("fencing token went from %d to %d", f0, f1)
		}
	})
}

func testWait(t *testing.T, gw *Gateway, nodes []*RedisNode) {
	t.Run("UntilReleased", func(t *testing.T) {
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":30000}`)
		tok := a.str(t, "token")
		const hold = 300 * time.Millisecond
		released := make(chan error, 1)
		start := time.Now()
		go func() {
			time.Sleep(hold) // the holder works for a while
			r, err := gw.try(http.MethodDelete, "/locks/"+res, "", "Lock-Token", tok)
			if err == nil && r.Status != http.StatusNoContent {
				err = fmt.Errorf("release: %v", r)
			}
			released <- err
		}()
		b := acquire(t, gw, res, `{"ttl_ms":5000,"wait_ms":3000}`)
		elapsed := time.Since(start)
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		wantStatus(t, b, http.StatusCreated)
		if elapsed < hold {
			t.Errorf("waiter got the lock after %v, before the holder released at %v", elapsed, hold)
		}
		if elapsed > hold+1500*time.Millisecond {
			t.Errorf("waiter woke %v after the release, want promptly", elapsed-hold)
		}
		if f0, f1 := a.num(t, "fencing_token"), b.num(t, "fencing_token"); f1 <= f0 {
			t.Errorf("fencing token went from %d to %d", f0, f1)
		}
	})

	t.Run("UntilExpired", func(t *testing.T) {
		res := resourceName(t)
		start := time.Now()
		lock(t, gw, res, `{"ttl_ms":500}`)
		b := acquire(t, gw, res, `{"wait_ms":5000}`)
		wantStatus(t, b, http.StatusCreated)
		if el := time.Since(start); el < 490*time.Millisecond || el > 3*time.Second {
			t.Errorf("waiter got a lock that expires after 500 ms at %v, want soon after 500 ms", el)
		}
	})

	t.Run("TimesOut", func(t *testing.T) {
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":30000}`)
		b := acquire(t, gw, res, `{"wait_ms":200}`)
		wantProblem(t, b, http.StatusConflict, "lock-held")
		wantNoSecret(t, b, a.str(t, "token"))
		retryAfter(t, b)
		if b.Elapsed < 200*time.Millisecond || b.Elapsed > 2*time.Second {
			t.Errorf("wait_ms 200 answered after %v, want ≥ 200 ms and well under 2 s", b.Elapsed)
		}
	})

	t.Run("NoBusyPolling", func(t *testing.T) {
		// A waiter is woken by the release or expiry (pub/sub, keyspace
		// notifications) with a polling fallback; it must not hammer Redis.
		// Ten commands per node in a one-second wait allows a fallback poll
		// every ~200 ms (each attempt may cost an acquire and a cleanup).
		res := resourceName(t)
		lock(t, gw, res, `{"ttl_ms":30000}`)
		before := lockCommands(t, nodes[0])
		b := acquire(t, gw, res, `{"wait_ms":1000}`)
		wantProblem(t, b, http.StatusConflict, "lock-held")
		if n := lockCommands(t, nodes[0]) - before; n > 10 {
			t.Errorf("one waiter sent %d commands to a node in %v: it polls Redis", n, b.Elapsed.Round(time.Millisecond))
		}
	})

	t.Run("FirstComeFirstServed", func(t *testing.T) {
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":30000}`)
		const waiters = 3
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
			errs  = make(chan error, waiters)
		)
		for i := range waiters {
			wg.Go(func() {
				r, err := gw.try(http.MethodPost, "/locks/"+res, `{"ttl_ms":10000,"wait_ms":10000}`)
				if err == nil && r.Status != http.StatusCreated {
					err = fmt.Errorf("waiter %d: %v", i, r)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				tok, _ := r.JSON["token"].(string)
				r, err = gw.try(http.MethodDelete, "/locks/"+res, "", "Lock-Token", tok)
				if err == nil && r.Status != http.StatusNoContent {
					err = fmt.Errorf("waiter %d release: %v", i, r)
				}
				if err != nil {
					errs <- err
				}
			})
			// The next one arrives once the gateway queued this one.
			eventually(t, 10*time.Second, fmt.Sprintf("%d waiters", i+1), func() bool {
				return scrapeMetrics(t, gw).value("redlockd_waiters") == float64(i+1)
			})
		}
		wantStatus(t, release(t, gw, res, a.str(t, "token")), http.StatusNoContent)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got, want := fmt.Sprint(order), "[0 1 2]"; got != want {
			t.Errorf("waiters served in order %s, want %s", got, want)
		}
	})
}

func testIdempotent(t *testing.T, gw *Gateway) {
	res := resourceName(t)
	tok := clientToken(t)
	body := fmt.Sprintf(`{"ttl_ms":4000,"token":%q}`, tok)

	start := time.Now()
	a := lock(t, gw, res, body)
	checkLockBody(t, a, start, res, 4000, 5)
	if got := a.str(t, "token"); got != tok {
		t.Fatalf("token %q, want the client's %q", got, tok)
	}

	time.Sleep(2 * time.Second) // let half the TTL pass (time is the subject)
	b := lock(t, gw, res, body)
	if got := b.str(t, "token"); got != tok {
		t.Errorf("retried acquire: token %q, want %q", got, tok)
	}
	if f0, f1 := a.num(t, "fencing_token"), b.num(t, "fencing_token"); f0 != f1 {
		t.Errorf("retried acquire: fencing_token %d, want the same %d", f1, f0)
	}
	i := inspect(t, gw, res)
	wantStatus(t, i, http.StatusOK)
	if rem := i.num(t, "remaining_ms"); rem <= 2000 {
		t.Errorf("remaining_ms %d after the retried acquire, want the TTL reset to ~4000 (2000 or less: not reset)", rem)
	}

	other := acquire(t, gw, res, fmt.Sprintf(`{"ttl_ms":1000,"token":%q}`, clientToken(t)))
	wantProblem(t, other, http.StatusConflict, "lock-held")
	wantNoSecret(t, other, tok)
	other = acquire(t, gw, res, "")
	wantProblem(t, other, http.StatusConflict, "lock-held")
	wantNoSecret(t, other, tok)

	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	c := lock(t, gw, res, body)
	if f0, f1 := a.num(t, "fencing_token"), c.num(t, "fencing_token"); f1 <= f0 {
		t.Errorf("new acquisition with the same token: fencing_token %d, want > %d", f1, f0)
	}
}

func testFencing(t *testing.T, gw *Gateway) {
	res := resourceName(t)
	var last int64
	for i := range 6 {
		// A holder that releases holds long enough for a loaded machine
		// to send its release in time; one left to expire, briefly.
		body := `{"ttl_ms":30000}`
		if i%2 == 1 {
			body = `{"ttl_ms":500}`
		}
		r := lock(t, gw, res, body)
		f := r.num(t, "fencing_token")
		if f <= last {
			t.Fatalf("holder %d: fencing_token %d, want > %d", i, f, last)
		}
		last = f
		if i%2 == 0 {
			wantStatus(t, release(t, gw, res, r.str(t, "token")), http.StatusNoContent)
		} else { // let it expire
			eventually(t, 5*time.Second, "lock expired", func() bool {
				return isNotHeld(inspect(t, gw, res))
			})
		}
	}
	// Another resource has its own sequence but also never goes backwards.
	other := resourceName(t)
	a := lock(t, gw, other, "").num(t, "fencing_token")
	if a <= 0 {
		t.Errorf("fencing_token %d, want > 0", a)
	}
}

func testRelease(t *testing.T, gw *Gateway, nodes []*RedisNode) {
	t.Run("Released", func(t *testing.T) {
		res := resourceName(t)
		a := lock(t, gw, res, "")
		tok := a.str(t, "token")
		r := release(t, gw, res, tok)
		wantStatus(t, r, http.StatusNoContent)
		if len(r.Body) != 0 {
			t.Errorf("204 with a body: %q", r.Body)
		}
		waitHolders(t, nodes, res, tok, 0)
		wantNotHeld(t, inspectAnswered(t, gw, res))

		b := lock(t, gw, res, "")
		if f0, f1 := a.num(t, "fencing_token"), b.num(t, "fencing_token"); f1 <= f0 {
			t.Errorf("fencing_token %d after release, want > %d", f1, f0)
		}
	})

	t.Run("Twice", func(t *testing.T) {
		// Release is idempotent: the retry of a release whose answer was
		// lost is told it worked, not that the lock had expired.
		res := resourceName(t)
		tok := lock(t, gw, res, "").str(t, "token")
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
		r := release(t, gw, res, clientToken(t))
		wantProblem(t, r, http.StatusConflict, "not-owner")
		if got := r.str(t, "lock_state"); got != "expired" {
			t.Errorf("lock_state %q, want expired", got)
		}
	})

	t.Run("NeverLocked", func(t *testing.T) {
		r := release(t, gw, resourceName(t), clientToken(t))
		wantProblem(t, r, http.StatusConflict, "not-owner")
		if got := r.str(t, "lock_state"); got != "expired" {
			t.Errorf("lock_state %q, want expired", got)
		}
	})

	t.Run("AfterExpiry", func(t *testing.T) {
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":150}`).str(t, "token")
		// Expired on every node (the slowest nodes' keys were set, and
		// expire, a little later than the quorum's).
		eventually(t, 5*time.Second, "lock expired", func() bool {
			return isNotHeld(inspect(t, gw, res)) && len(holders(t, nodes, res, tok)) == 0
		})
		r := release(t, gw, res, tok)
		wantProblem(t, r, http.StatusConflict, "not-owner")
		if got := r.str(t, "lock_state"); got != "expired" {
			t.Errorf("lock_state %q, want expired", got)
		}
	})

	t.Run("WrongToken", func(t *testing.T) {
		res := resourceName(t)
		a := lock(t, gw, res, "")
		tok := a.str(t, "token")
		waitHolders(t, nodes, res, tok, 5)
		r := release(t, gw, res, clientToken(t))
		wantProblem(t, r, http.StatusConflict, "not-owner")
		wantNoSecret(t, r, tok)
		if got := r.str(t, "lock_state"); got != "held-by-other" {
			t.Errorf("lock_state %q, want held-by-other", got)
		}
		i := inspect(t, gw, res)
		wantStatus(t, i, http.StatusOK)
		if got, want := i.num(t, "fencing_token"), a.num(t, "fencing_token"); got != want {
			t.Errorf("fencing_token %d after a wrong release, want %d", got, want)
		}
		if got := holders(t, nodes, res, tok); len(got) != 5 {
			t.Errorf("token on nodes %v after a wrong release, want all 5", got)
		}
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	})

	t.Run("TokenInQueryIgnored", func(t *testing.T) {
		// The token never travels in a URL: without the header it is a 400.
		res := resourceName(t)
		tok := lock(t, gw, res, "").str(t, "token")
		r := gw.do(t, http.MethodDelete, "/locks/"+res+"?token="+tok, "")
		wantProblem(t, r, http.StatusBadRequest, "invalid-request")
		wantStatus(t, inspect(t, gw, res), http.StatusOK)
	})
}

func testExtend(t *testing.T, gw *Gateway, nodes []*RedisNode) {
	t.Run("Extended", func(t *testing.T) {
		res := resourceName(t)
		a := lock(t, gw, res, `{"ttl_ms":5000}`)
		tok := a.str(t, "token")
		start := time.Now()
		r := extend(t, gw, res, tok, `{"ttl_ms":8000}`)
		wantStatus(t, r, http.StatusOK)
		checkLockBody(t, r, start, res, 8000, 5)
		if got := r.str(t, "token"); got != tok {
			t.Errorf("token %q after extend, want %q", got, tok)
		}
		if f0, f1 := a.num(t, "fencing_token"), r.num(t, "fencing_token"); f0 != f1 {
			t.Errorf("fencing_token %d after extend, want %d", f1, f0)
		}
		if e0, e1 := a.str(t, "expires_at"), r.str(t, "expires_at"); e1 <= e0 {
			t.Errorf("expires_at %s after extend, want later than %s", e1, e0)
		}
		if rem := inspect(t, gw, res).num(t, "remaining_ms"); rem <= 5000 {
			t.Errorf("remaining_ms %d after extending to 8000 ms, want > 5000", rem)
		}
	})

	t.Run("DefaultTTL", func(t *testing.T) {
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":5000}`).str(t, "token")
		r := extend(t, gw, res, tok, "")
		wantStatus(t, r, http.StatusOK)
		if got := r.num(t, "ttl_ms"); got != defaultTTL {
			t.Errorf("ttl_ms %d, want %d", got, defaultTTL)
		}
	})

	t.Run("KeepsAlive", func(t *testing.T) {
		res := resourceName(t)
		// Time is the subject: extensions every quarter TTL keep the lock
		// for twice its TTL, with three quarters of it as a loaded
		// machine's margin.
		a := lock(t, gw, res, `{"ttl_ms":2000}`)
		tok := a.str(t, "token")
		start := time.Now()
		for time.Since(start) < 4*time.Second { // twice the TTL
			time.Sleep(500 * time.Millisecond)
			wantStatus(t, extend(t, gw, res, tok, `{"ttl_ms":2000}`), http.StatusOK)
		}
		i := inspect(t, gw, res)
		wantStatus(t, i, http.StatusOK)
		if got, want := i.num(t, "fencing_token"), a.num(t, "fencing_token"); got != want {
			t.Errorf("fencing_token %d, want %d", got, want)
		}
		wantProblem(t, acquire(t, gw, res, ""), http.StatusConflict, "lock-held")
		wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	})

	t.Run("AfterExpiry", func(t *testing.T) {
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":150}`).str(t, "token")
		// Expired on every node (the slowest nodes' keys were set, and
		// expire, a little later than the quorum's).
		eventually(t, 5*time.Second, "lock expired", func() bool {
			return isNotHeld(inspect(t, gw, res)) && len(holders(t, nodes, res, tok)) == 0
		})
		r := extend(t, gw, res, tok, `{"ttl_ms":5000}`)
		wantProblem(t, r, http.StatusConflict, "not-owner")
		if got := r.str(t, "lock_state"); got != "expired" {
			t.Errorf("lock_state %q, want expired", got)
		}
		// Extending a lost lock never brings it back.
		wantNotHeld(t, inspectAnswered(t, gw, res))
		if got := holders(t, nodes, res, tok); len(got) != 0 {
			t.Errorf("expired token back on nodes %v", got)
		}
	})

	t.Run("WrongToken", func(t *testing.T) {
		res := resourceName(t)
		tok := lock(t, gw, res, `{"ttl_ms":5000}`).str(t, "token")
		r := extend(t, gw, res, clientToken(t), `{"ttl_ms":20000}`)
		wantProblem(t, r, http.StatusConflict, "not-owner")
		wantNoSecret(t, r, tok)
		if got := r.str(t, "lock_state"); got != "held-by-other" {
			t.Errorf("lock_state %q, want held-by-other", got)
		}
		if rem := inspect(t, gw, res).num(t, "remaining_ms"); rem > 5000 {
			t.Errorf("remaining_ms %d: a wrong token extended the lock", rem)
		}
	})
}

func testInspect(t *testing.T, gw *Gateway) {
	t.Run("Held", func(t *testing.T) {
		res := resourceName(t)
		const owner = "host-1/pid 42 job=nightly"
		a := lock(t, gw, res, fmt.Sprintf(`{"ttl_ms":20000,"owner":%q}`, owner))
		r := inspect(t, gw, res)
		wantStatus(t, r, http.StatusOK)
		if got := r.str(t, "resource"); got != res {
			t.Errorf("resource %q, want %q", got, res)
		}
		if held, ok := r.JSON["held"].(bool); !ok || !held {
			t.Errorf("held = %v, want true", r.JSON["held"])
		}
		if got := r.str(t, "owner"); got != owner {
			t.Errorf("owner %q, want %q", got, owner)
		}
		if got, want := r.num(t, "fencing_token"), a.num(t, "fencing_token"); got != want {
			t.Errorf("fencing_token %d, want %d", got, want)
		}
		if rem := r.num(t, "remaining_ms"); rem <= 0 || rem > 20000 {
			t.Errorf("remaining_ms %d, want in (0, 20000]", rem)
		}
		wantCount(t, r, "held_nodes", 3, 5)
		if _, ok := r.JSON["token"]; ok {
			t.Errorf("GET has a token member: %s", r.Body)
		}
		wantNoSecret(t, r, a.str(t, "token"))
	})

	t.Run("Free", func(t *testing.T) {
		wantNotHeld(t, inspectAnswered(t, gw, resourceName(t)))
	})
}

func testOperations(t *testing.T, gw *Gateway, nodes []*RedisNode) {
	t.Run("Healthz", func(t *testing.T) {
		wantStatus(t, gw.do(t, http.MethodGet, "/healthz", ""), http.StatusOK)
	})

	t.Run("Readyz", func(t *testing.T) {
		r := gw.do(t, http.MethodGet, "/readyz", "")
		wantStatus(t, r, http.StatusOK)
		if got := r.str(t, "status"); got != "ready" {
			t.Errorf("status %q, want ready", got)
		}
		if got := r.num(t, "quorum"); got != 3 {
			t.Errorf("quorum %d, want 3", got)
		}
		checkReadyNodes(t, r, nodes, nil)
	})

	t.Run("OpenAPI", func(t *testing.T) {
		r := gw.do(t, http.MethodGet, "/openapi.yaml", "")
		wantStatus(t, r, http.StatusOK)
		for _, s := range []string{"openapi:", "/locks/{resource}"} {
			if !strings.Contains(string(r.Body), s) {
				t.Errorf("/openapi.yaml does not contain %q", s)
			}
		}
	})

	t.Run("RequestIDs", func(t *testing.T) {
		res := resourceName(t)
		tok := lock(t, gw, res, "").str(t, "token")
		rs := []*Resp{
			gw.do(t, http.MethodGet, "/healthz", ""),
			inspect(t, gw, res),
			acquire(t, gw, res, ""),               // 409
			acquire(t, gw, res, `{"ttl_ms":1}`),   // 400
			gw.do(t, http.MethodGet, "/nope", ""), // 404
			gw.do(t, http.MethodPut, "/locks/"+res, ""),
			acquire(t, gw, res, `{"owner":"`+strings.Repeat("x", 20000)+`"}`), // 413
			release(t, gw, res, tok),
		}
		seen := map[string]bool{}
		for _, r := range rs {
			id := r.Header.Get("X-Request-Id")
			if id == "" {
				continue // do() reported it
			}
			if seen[id] {
				t.Errorf("X-Request-Id %q used twice", id)
			}
			seen[id] = true
		}
	})
}

// checkReadyNodes checks the nodes list of /readyz: one entry per node with
// its host:port, up unless its index is in down, never a password.
func checkReadyNodes(t *testing.T, r *Resp, nodes []*RedisNode, down map[int]bool) {
	t.Helper()
	list, ok := r.JSON["nodes"].([]any)
	if !ok {
		t.Fatalf("/readyz nodes is %T, want a list: %s", r.JSON["nodes"], r.Body)
	}
	if len(list) != len(nodes) {
		t.Fatalf("/readyz lists %d nodes, want %d: %s", len(list), len(nodes), r.Body)
	}
	byAddr := map[string]map[string]any{}
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			t.Fatalf("/readyz node entry %T: %s", e, r.Body)
		}
		addr, _ := m["addr"].(string)
		byAddr[addr] = m
	}
	for i, n := range nodes {
		m, ok := byAddr[n.Addr]
		if !ok {
			t.Errorf("/readyz has no node %q: %s", n.Addr, r.Body)
			continue
		}
		if up, _ := m["up"].(bool); up == down[i] {
			t.Errorf("/readyz node %s up=%v, want %v", n.Addr, m["up"], !down[i])
		}
		if q, ok := m["quarantined_until"]; !ok || q != nil {
			t.Errorf("/readyz node %s quarantined_until=%v, want null", n.Addr, q)
		}
		if !down[i] {
			if _, ok := m["latency_ms"].(interface{ Float64() (float64, error) }); !ok {
				t.Errorf("/readyz node %s latency_ms=%v, want a number", n.Addr, m["latency_ms"])
			}
		}
	}
}

// lockCommands counts the commands the node has run but those of the
// gateway's health checks (PING, INFO, GET and SET of the health key),
// which run every second whether anyone waits or not.
func lockCommands(t *testing.T, n *RedisNode) int64 {
	t.Helper()
	var total int64
	for name, calls := range commandCalls(t, n) {
		if !slices.Contains([]string{"ping", "info", "get", "set"}, name) {
			total += calls
		}
	}
	return total
}

// commandCalls is how many times the node has run each command (INFO
// commandstats), by lower-case name.
func commandCalls(t *testing.T, n *RedisNode) map[string]int64 {
	t.Helper()
	info, err := n.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	out := map[string]int64{}
	for _, l := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(l), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(stats, ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats line %q: %v", l, err)
		}
		out[name] = c
	}
	return out
}
