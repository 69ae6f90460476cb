package tests

import (
	"net/http"
	"testing"
	"time"
)

// TestReplicas: two gateways on the same five nodes share no state but
// Redis, so a lock taken through one is held for the other, and a release
// through one wakes a waiter on the other at once (docs/operations.md
// "Scaling the gateway horizontally"; docs/safety.md "Guarantees and limits,
// in plain words", Waiting): the release is announced on every node, and
// the fallback poll (30s) and the holder's TTL (30s) come too late to wake
// it in time.
func TestReplicas(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	a := startGateway(t, nodes)
	b := startGateway(t, nodes)
	res := resourceName(t)

	tok := lock(t, a, res, `{"ttl_ms":30000}`).str(t, "token")
	waitHolders(t, nodes, res, tok, 5)
	// A round is decided at the quorum: node 0 may run the refused acquire's
	// script after its 409, so the waiter's round is the second one counted.
	before := evalshaCalls(t, nodes[0])
	wantProblem(t, acquire(t, b, res, ""), http.StatusConflict, "lock-held")
	got := make(chan *Resp, 1)
	go func() {
		r, err := b.try(http.MethodPost, "/locks/"+res, `{"wait_ms":20000}`)
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	// The waiter's first round reaches the nodes, fails, and it sleeps.
	eventually(t, 5*time.Second, "the waiter's first round", func() bool { return evalshaCalls(t, nodes[0]) > before+1 })
	released := time.Now()
	wantStatus(t, release(t, a, res, tok), http.StatusNoContent)
	r := <-got
	if r == nil {
		t.FailNow()
	}
	wantStatus(t, r, http.StatusCreated)
	if d := time.Since(released); d > 3*time.Second {
		t.Fatalf("the waiter on the other replica got the lock %v after the release", d)
	}
	// And the other way round: b's lock is held for a.
	wantProblem(t, acquire(t, a, res, ""), http.StatusConflict, "lock-held")
	wantStatus(t, release(t, a, res, r.str(t, "token")), http.StatusNoContent)
}

// evalshaCalls is how many EVALSHA commands the node has run.
func evalshaCalls(t *testing.T, n *RedisNode) int64 { return commandCalls(t, n)["evalsha"] }
