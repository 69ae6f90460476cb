package tests

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"
)

// Idempotent requests under node faults: a re-acquire with the client's
// token and a retried release, against real paused redis-servers.

// pauseAll pauses nodes and returns a func that resumes them (also run at
// cleanup, so a failed test leaves nothing stopped).
func pauseAll(t *testing.T, nodes ...*RedisNode) (resume func()) {
	t.Helper()
	for _, n := range nodes {
		n.Pause()
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			for _, n := range nodes {
				n.Resume()
			}
		}
	}
	t.Cleanup(resume)
	return resume
}

// TestReacquireAfterLossNewFence: a client token that lost its lock (its key
// expired on 3 of 5 paused nodes and lives on 2) and re-acquires after
// another holder gets a fencing token above that holder's, not its old one
// (docs/safety.md "When fencing tokens can go backwards": idempotent
// re-acquire).
func TestReacquireAfterLossNewFence(t *testing.T) {
	t.Parallel()
	nodes, gw := startFaultGateway(t)
	res := resourceName(t)
	tok := clientToken(t)

	a := acquire(t, gw, res, fmt.Sprintf(`{"ttl_ms":2000,"token":%q}`, tok))
	wantStatus(t, a, http.StatusCreated)
	acquired := time.Now()
	f1 := a.num(t, "fencing_token")
	waitHolders(t, nodes, res, tok, 5) // a late SET would outlive the pause

	resume := pauseAll(t, nodes[2], nodes[3], nodes[4])
	wantProblem(t, extend(t, gw, res, tok, `{"ttl_ms":10000}`), http.StatusServiceUnavailable, "quorum-unavailable")
	// Time is the subject: T's key must expire on the paused nodes.
	time.Sleep(time.Until(acquired.Add(2300 * time.Millisecond)))
	resume()
	if got := holders(t, nodes, res, tok); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("T holds on nodes %v, want [0 1]", got)
	}

	v := acquire(t, gw, res, `{"ttl_ms":5000}`)
	wantStatus(t, v, http.StatusCreated)
	f2 := v.num(t, "fencing_token")
	if f2 <= f1 {
		t.Fatalf("V's fence %d, want above T's %d", f2, f1)
	}
	wantStatus(t, release(t, gw, res, v.str(t, "token")), http.StatusNoContent)

	again := acquire(t, gw, res, fmt.Sprintf(`{"ttl_ms":5000,"token":%q}`, tok))
	wantStatus(t, again, http.StatusCreated)
	if f3 := again.num(t, "fencing_token"); f3 <= f2 {
		t.Fatalf("T's re-acquire got fence %d, want above V's %d (T's first was %d)", f3, f2, f1)
	}
	wantCount(t, again, "locked_nodes", 3, 5)
}

// TestReacquireIgnoresLateSets: the SETs of a client token's failed
// re-acquire that land late, when 3 paused nodes resume, do not let its next
// re-acquire keep its first lock's fence, which another holder's has passed
// since, although with the one node still holding that lock they make a
// quorum (docs/safety.md "When fencing tokens can go backwards": idempotent
// re-acquire).
func TestReacquireIgnoresLateSets(t *testing.T) {
	t.Parallel()
	nodes, gw := startFaultGateway(t)
	res := resourceName(t)
	tok := clientToken(t)
	ctx := context.Background()
	// Counters that disagree: T's fence is written back beside its lock.
	if err := nodes[4].Client().Set(ctx, "redlockd:fence:/"+res, 10, 0).Err(); err != nil {
		t.Fatal(err)
	}

	a := acquire(t, gw, res, fmt.Sprintf(`{"ttl_ms":2000,"token":%q}`, tok))
	wantStatus(t, a, http.StatusCreated)
	acquired := time.Now()
	f1 := a.num(t, "fencing_token")
	waitHolders(t, nodes, res, tok, 5) // a late SET would outlive the pause

	// T's lock lives on node 0 only: extended there while the rest are
	// paused, expired on the rest.
	resume := pauseAll(t, nodes[1], nodes[2], nodes[3], nodes[4])
	wantProblem(t, extend(t, gw, res, tok, `{"ttl_ms":20000}`), http.StatusServiceUnavailable, "quorum-unavailable")
	time.Sleep(time.Until(acquired.Add(2300 * time.Millisecond)))
	resume()
	if got := holders(t, nodes, res, tok); !slices.Equal(got, []int{0}) {
		t.Fatalf("T holds on nodes %v, want [0]", got)
	}

	v := acquire(t, gw, res, `{"ttl_ms":5000}`)
	wantStatus(t, v, http.StatusCreated)
	f2 := v.num(t, "fencing_token")
	wantStatus(t, release(t, gw, res, v.str(t, "token")), http.StatusNoContent)
	waitHolders(t, nodes, res, v.str(t, "token"), 0) // V's key would refuse the late SETs

	// A failed re-acquire: node 0 holds already, node 4 grants, 1-3 paused.
	resume = pauseAll(t, nodes[1], nodes[2], nodes[3])
	wantProblem(t, acquire(t, gw, res, fmt.Sprintf(`{"ttl_ms":10000,"token":%q}`, tok)), http.StatusServiceUnavailable, "quorum-unavailable")
	resume()
	// Node 4's fresh grant is undone, unless it answered after the node
	// timeout (a loaded machine): a chosen token's late grants are left to
	// expire, as its client may retry. Either way it proves nothing here.
	eventually(t, 5*time.Second, "the failed attempt's SETs land on the resumed nodes", func() bool {
		h := holders(t, nodes, res, tok)
		return slices.Equal(h, []int{0, 1, 2, 3}) || slices.Equal(h, []int{0, 1, 2, 3, 4})
	})

	again := acquire(t, gw, res, fmt.Sprintf(`{"ttl_ms":5000,"token":%q}`, tok))
	wantStatus(t, again, http.StatusCreated)
	if f3 := again.num(t, "fencing_token"); f3 <= f2 {
		t.Fatalf("T's re-acquire got fence %d, want above V's %d (T's first was %d)", f3, f2, f1)
	}
}

// TestReleaseRetried: a release whose answer the client never saw (503 while
// a majority was paused; the deletes ran late) answers 204 when retried, also
// after another client took the lock, which it leaves alone; a token that
// never held the lock still gets 409 (openapi.yaml DELETE /locks/{resource};
// docs/safety.md "Guarantees and limits, in plain words").
func TestReleaseRetried(t *testing.T) {
	t.Parallel()
	nodes, gw := startFaultGateway(t)
	res := resourceName(t)
	// Every node has run release.lua once: a paused node's late EVALSHA
	// would otherwise find no script (NOSCRIPT), with nobody left to EVAL it.
	warm := resourceName(t)
	wantStatus(t, release(t, gw, warm, lock(t, gw, warm, "").str(t, "token")), http.StatusNoContent)
	tok := lock(t, gw, res, `{"ttl_ms":10000}`).str(t, "token")
	waitHolders(t, nodes, res, tok, 5) // and every node has run the warm release

	resume := pauseAll(t, nodes[2], nodes[3], nodes[4])
	wantProblem(t, release(t, gw, res, tok), http.StatusServiceUnavailable, "quorum-unavailable")
	resume()
	eventually(t, 5*time.Second, "the late deletes run on the resumed nodes", func() bool {
		return len(holders(t, nodes, res, tok)) == 0
	})
	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)

	other := lock(t, gw, res, `{"ttl_ms":10000}`).str(t, "token")
	waitHolders(t, nodes, res, other, 5)
	wantStatus(t, release(t, gw, res, tok), http.StatusNoContent)
	if got := holders(t, nodes, res, other); len(got) != 5 {
		t.Fatalf("the retried release touched the new holder's lock: it holds on %v", got)
	}
	r := release(t, gw, res, clientToken(t))
	wantProblem(t, r, http.StatusConflict, "not-owner")
	if got := r.str(t, "lock_state"); got != "held-by-other" {
		t.Errorf("lock_state %q, want held-by-other", got)
	}
	wantStatus(t, release(t, gw, res, other), http.StatusNoContent)
	r = release(t, gw, res, clientToken(t))
	wantProblem(t, r, http.StatusConflict, "not-owner")
	if got := r.str(t, "lock_state"); got != "expired" {
		t.Errorf("lock_state %q, want expired", got)
	}
}

// TestRetryWhileOthersWait: a retried acquire with the client token that
// holds the lock (its answer was lost) is the idempotent success with the
// same fencing token, for every kind, with or without wait_ms, while another
// client waits for the lock on the same gateway: it is neither refused
// because others wait nor queued behind them while its own lock runs out; a
// stranger is refused with retry_after_ms from the holder's remaining time
// (openapi.yaml POST /locks/{resource}, and info.description
// "Behaviour where the specification is silent"; docs/semaphores.md
// "The API": client tokens).
func TestRetryWhileOthersWait(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, startCluster(t, 3))
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			res, tok := resourceName(t), clientToken(t)
			waiter := k
			if k.name == "read" {
				waiter = lockKinds[0] // a writer waits behind the reader
			}
			held := k.acquire(t, gw, res, fmt.Sprintf(`,"ttl_ms":20000,"token":%q`, tok))
			wantStatus(t, held, http.StatusCreated)
			fence := fenceOf(t, held)
			served := make(chan *Resp, 1)
			go func() {
				r, err := gw.try(http.MethodPost, waiter.acquireURL(res), waiter.body(res, `,"ttl_ms":20000,"wait_ms":30000`))
				if err != nil {
					t.Error(err)
				}
				served <- r
			}()
			eventually(t, 10*time.Second, "the waiter in the queue", func() bool {
				return scrapeMetrics(t, gw).value("redlockd_waiters") == 1
			})
			for _, more := range []string{"", `,"wait_ms":5000`} {
				r := k.acquire(t, gw, res, fmt.Sprintf(`,"ttl_ms":20000,"token":%q%s`, tok, more))
				wantStatus(t, r, http.StatusCreated)
				if r.str(t, "token") != tok || fenceOf(t, r) != fence {
					t.Fatalf("retry%s = %s; want the token's lock, fencing token %d", more, r, fence)
				}
			}
			stranger := k.acquire(t, gw, res, `,"ttl_ms":20000`)
			if k.name == "read" {
				stranger = acquire(t, gw, res, "") // a writer
			}
			wantProblem(t, stranger, http.StatusConflict, "lock-held")
			// The holder has about 20 s left; the hint adds up to 10% plus 100 ms.
			if ms := stranger.num(t, "retry_after_ms"); ms < 5000 {
				t.Errorf("retry_after_ms = %d, want about the holder's remaining 20 s", ms)
			}
			if got := scrapeMetrics(t, gw).value("redlockd_waiters"); got != 1 {
				t.Fatalf("waiters = %v, want the one waiter still waiting", got)
			}
			wantStatus(t, gw.do(t, http.MethodDelete, k.url(res), "", "Lock-Token", tok), http.StatusNoContent)
			r := <-served
			wantStatus(t, r, http.StatusCreated)
			if fenceOf(t, r) <= fence && waiter.name != "read" {
				t.Errorf("the waiter's fencing token %d is not above the holder's %d", fenceOf(t, r), fence)
			}
			wantStatus(t, gw.do(t, http.MethodDelete, waiter.url(res), "", "Lock-Token", r.str(t, "token")), http.StatusNoContent)
		})
	}
}
