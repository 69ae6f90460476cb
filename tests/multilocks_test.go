package tests

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// multiBody is the body of POST /locks for resources, with more members
// (e.g. `,"wait_ms":5000`).
func multiBody(resources []string, more string) string {
	return `{"resources":["` + strings.Join(resources, `","`) + `"]` + more + `}`
}

// multiPath is the Location of a multi-resource lock on resources.
func multiPath(resources []string) string {
	return "/locks?" + url.Values{"resource": resources}.Encode()
}

// multiFences returns the fencing tokens of a multi-resource answer by
// resource, checking that it lists resources in order.
func multiFences(t testing.TB, r *Resp, resources []string) map[string]int64 {
	t.Helper()
	list, _ := r.JSON["resources"].([]any)
	fences := map[string]int64{}
	for i, e := range list {
		m, _ := e.(map[string]any)
		name, _ := m["resource"].(string)
		n, _ := m["fencing_token"].(interface{ Int64() (int64, error) })
		if i >= len(resources) || name != resources[i] || n == nil {
			t.Fatalf("%s: resources %v, want %v in order, each with a fencing_token", r, list, resources)
		}
		fences[name], _ = n.Int64()
	}
	if len(fences) != len(resources) {
		t.Fatalf("%s: %d resources, want %d", r, len(fences), len(resources))
	}
	return fences
}

// TestMultiLocks: locks on several resources are taken all or none with one
// token, each resource with a fencing token in that resource's order; they
// conflict with single locks, are extended and released (idempotently) with
// the one token, wait and are woken by a release, never deadlock, take a
// client token idempotently and refuse bad input with 400 (docs/several-resources.md
// "Locks on several resources"; openapi.yaml /locks). Every request is
// checked against openapi.yaml.
func TestMultiLocks(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes)

	t.Run("AllOrNone", func(t *testing.T) {
		res := resourceName(t)
		rs := []string{res + "-a", res + "-b", res + "-c"}
		b := lock(t, gw, rs[1], "")
		before := keySnapshot(t, nodes)
		wantProblem(t, gw.do(t, http.MethodPost, "/locks", multiBody(rs, "")), http.StatusConflict, "lock-held")
		if after := keySnapshot(t, nodes); after != before {
			t.Errorf("a refused multi-resource acquire changed keys:\nbefore\n%s\nafter\n%s", before, after)
		}
		bFence := b.num(t, "fencing_token")
		wantStatus(t, release(t, gw, rs[1], b.str(t, "token")), http.StatusNoContent)

		m := gw.do(t, http.MethodPost, "/locks", multiBody(rs, `,"ttl_ms":20000,"owner":"transfer"`))
		wantStatus(t, m, http.StatusCreated)
		if loc := m.Header.Get("Location"); loc != multiPath(rs) {
			t.Errorf("Location %q, want %q", loc, multiPath(rs))
		}
		wantCount(t, m, "locked_nodes", 3, 5)
		token := m.str(t, "token")
		fences := multiFences(t, m, rs)
		if fences[rs[1]] <= bFence {
			t.Errorf("fence of %s: %d, not above the single lock's %d before", rs[1], fences[rs[1]], bFence)
		}
		// Each resource is held as a write lock, shown by inspect.
		for _, r := range rs {
			info := inspect(t, gw, r)
			if info.JSON["held"] != true || info.str(t, "owner") != "transfer" || info.num(t, "fencing_token") != fences[r] {
				t.Errorf("inspect %s: %s", r, info.Body)
			}
			wantNoSecret(t, info, token)
		}
		wantProblem(t, acquire(t, gw, rs[2], ""), http.StatusConflict, "lock-held")
		wantProblem(t, gw.do(t, http.MethodPost, "/locks", multiBody([]string{res + "-z", rs[0]}, "")), http.StatusConflict, "lock-held")

		e := gw.do(t, http.MethodPatch, multiPath(rs), `{"ttl_ms":30000}`, "Lock-Token", token)
		wantStatus(t, e, http.StatusOK)
		if got := multiFences(t, e, rs); fmt.Sprint(got) != fmt.Sprint(fences) || e.str(t, "token") != token || e.num(t, "ttl_ms") != 30000 {
			t.Errorf("extend: %s; want fences %v", e.Body, fences)
		}
		wantProblem(t, gw.do(t, http.MethodPatch, multiPath(rs), "", "Lock-Token", clientToken(t)), http.StatusConflict, "not-owner")
		wantProblem(t, gw.do(t, http.MethodDelete, multiPath(rs), "", "Lock-Token", clientToken(t)), http.StatusConflict, "not-owner")

		wantStatus(t, gw.do(t, http.MethodDelete, multiPath(rs), "", "Lock-Token", token), http.StatusNoContent)
		wantStatus(t, gw.do(t, http.MethodDelete, multiPath(rs), "", "Lock-Token", token), http.StatusNoContent) // idempotent
		for _, r := range rs {
			wantNotHeld(t, inspectAnswered(t, gw, r))
		}
		wantProblem(t, gw.do(t, http.MethodPatch, multiPath(rs), "", "Lock-Token", token), http.StatusConflict, "not-owner")
	})

	// docs/several-resources.md "Extend, release, and giving back part of it": each resource is a
	// writer's lock held with the token, so one resource's path releases it
	// alone.
	t.Run("ReleaseOne", func(t *testing.T) {
		res := resourceName(t)
		rs := []string{res + "-a", res + "-b"}
		m := gw.do(t, http.MethodPost, "/locks", multiBody(rs, `,"ttl_ms":20000`))
		wantStatus(t, m, http.StatusCreated)
		token := m.str(t, "token")
		wantStatus(t, release(t, gw, rs[0], token), http.StatusNoContent)
		wantNotHeld(t, inspectAnswered(t, gw, rs[0]))
		if info := inspect(t, gw, rs[1]); info.JSON["held"] != true {
			t.Errorf("inspect %s after the release of %s alone: %s", rs[1], rs[0], info.Body)
		}
		wantProblem(t, gw.do(t, http.MethodPatch, multiPath(rs), "", "Lock-Token", token), http.StatusConflict, "not-owner")
		wantStatus(t, gw.do(t, http.MethodDelete, multiPath(rs), "", "Lock-Token", token), http.StatusNoContent)
		wantNotHeld(t, inspectAnswered(t, gw, rs[1]))
	})

	t.Run("Idempotent", func(t *testing.T) {
		res := resourceName(t)
		rs := []string{res + "-1", res + "-2"}
		tok := clientToken(t)
		first := gw.do(t, http.MethodPost, "/locks", multiBody(rs, `,"token":"`+tok+`"`))
		wantStatus(t, first, http.StatusCreated)
		again := gw.do(t, http.MethodPost, "/locks", multiBody(rs, `,"token":"`+tok+`"`))
		wantStatus(t, again, http.StatusCreated)
		if a, b := multiFences(t, first, rs), multiFences(t, again, rs); fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("the same token again: fences %v, then %v", a, b)
		}
		wantStatus(t, gw.do(t, http.MethodDelete, multiPath(rs), "", "Lock-Token", tok), http.StatusNoContent)
	})

	t.Run("Waiting", func(t *testing.T) {
		res := resourceName(t)
		rs := []string{res + "-x", res + "-y"}
		held := lock(t, gw, rs[1], `{"ttl_ms":30000}`)
		done := make(chan *Resp, 1)
		go func() {
			r, err := gw.try(http.MethodPost, "/locks", multiBody(rs, `,"wait_ms":20000`))
			if err != nil {
				r = &Resp{Body: []byte(err.Error())}
			}
			done <- r
		}()
		eventually(t, 10*time.Second, "1 waiter", func() bool { return scrapeMetrics(t, gw).value("redlockd_waiters") == 1 })
		released := time.Now()
		wantStatus(t, release(t, gw, rs[1], held.str(t, "token")), http.StatusNoContent)
		m := <-done
		wantStatus(t, m, http.StatusCreated)
		// Woken by the release, not by a poll or the 30s TTL.
		if d := time.Since(released); d > 5*time.Second {
			t.Errorf("the waiter got the locks %v after the release", d)
		}
		wantStatus(t, gw.do(t, http.MethodDelete, multiPath(rs), "", "Lock-Token", m.str(t, "token")), http.StatusNoContent)
	})

	// Two clients taking {a, b} and {b, a} over and over never deadlock, and
	// both progress: a node grants all of a request's resources or none.
	t.Run("NoDeadlock", func(t *testing.T) {
		res := resourceName(t)
		orders := [][]string{{res + "-a", res + "-b"}, {res + "-b", res + "-a"}}
		const rounds = 30
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		got := make([]int, 2)
		for i, rs := range orders {
			wg.Go(func() {
				for range rounds {
					r, err := gw.try(http.MethodPost, "/locks", multiBody(rs, `,"ttl_ms":5000,"wait_ms":10000`))
					if err == nil && r.Status != http.StatusCreated {
						err = fmt.Errorf("client %d: %v", i, r)
					}
					if err != nil {
						errs <- err
						return
					}
					r, err = gw.try(http.MethodDelete, multiPath(rs), "", "Lock-Token", r.str(t, "token"))
					if err == nil && r.Status != http.StatusNoContent {
						err = fmt.Errorf("client %d release: %v", i, r)
					}
					if err != nil {
						errs <- err
						return
					}
					got[i]++
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got[0] != rounds || got[1] != rounds {
			t.Errorf("rounds done: %v, want %d each", got, rounds)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		many := make([]string, 17)
		for i := range many {
			many[i] = fmt.Sprintf("r%d", i)
		}
		for _, body := range []string{"", `{}`, `{"resources":[]}`, multiBody(many, ""), `{"resources":["a","a"]}`,
			`{"resources":["a","b%2Fc"]}`, `{"resources":["a",7]}`, `{"resources":"a"}`, `{"resources":["a"],"mode":"write"}`} {
			wantProblem(t, gw.do(t, http.MethodPost, "/locks", body), http.StatusBadRequest, "invalid-request")
		}
		tok := clientToken(t)
		for _, path := range []string{"/locks", "/locks?resource=a&resource=a", "/locks?resource=..", multiPath(many)} {
			wantProblem(t, gw.do(t, http.MethodDelete, path, "", "Lock-Token", tok), http.StatusBadRequest, "invalid-request")
			wantProblem(t, gw.do(t, http.MethodPatch, path, "", "Lock-Token", tok), http.StatusBadRequest, "invalid-request")
		}
		wantProblem(t, gw.do(t, http.MethodDelete, "/locks?resource=a", ""), http.StatusBadRequest, "invalid-request")
	})
}

// TestMultiNamespaces: locks on several resources live in the caller's
// namespace: a reader of one of them in another namespace does not keep
// them out; in their own namespace it does, and a multi-resource lock keeps
// out a reader there; another namespace's key cannot release them, even
// with the token, and no key is 401 (openapi.yaml "Authentication and
// namespaces").
func TestMultiNamespaces(t *testing.T) {
	t.Parallel()
	a, b := keygen(t, "svc-a", "team-a"), keygen(t, "svc-b", "team-b")
	gw := startGateway(t, startCluster(t, 3), "--api-keys-file", keysFile(t, a, b))
	res := resourceName(t)
	rs := []string{res + "-1", res + "-2"}

	r := gw.do(t, http.MethodPost, "/locks/"+rs[1], readBody, bearer(b.Key)...)
	wantStatus(t, r, http.StatusCreated)
	wantProblem(t, gw.do(t, http.MethodPost, "/locks", multiBody(rs, ""), bearer(b.Key)...), http.StatusConflict, "lock-held")
	m := gw.do(t, http.MethodPost, "/locks", multiBody(rs, ""), bearer(a.Key)...)
	wantStatus(t, m, http.StatusCreated)
	wantProblem(t, gw.do(t, http.MethodPost, "/locks/"+rs[0], readBody, bearer(a.Key)...), http.StatusConflict, "lock-held")
	tok := append(bearer(b.Key), "Lock-Token", m.str(t, "token"))
	wantProblem(t, gw.do(t, http.MethodDelete, multiPath(rs), "", tok...), http.StatusConflict, "not-owner")
	wantStatus(t, gw.do(t, http.MethodDelete, multiPath(rs), "", append(bearer(a.Key), "Lock-Token", m.str(t, "token"))...), http.StatusNoContent)
	wantProblem(t, gw.do(t, http.MethodPost, "/locks", multiBody(rs, "")), http.StatusUnauthorized, "unauthorized")
	wantStatus(t, gw.do(t, http.MethodDelete, "/locks/"+rs[1], "", append(bearer(b.Key), "Lock-Token", r.str(t, "token"))...), http.StatusNoContent)
}

// TestMultiUnavailable: with a majority of nodes down, acquiring, extending
// and releasing locks on several resources answer 503 quorum-unavailable
// (the outcome cannot be known) within about the node timeout
// (docs/safety.md "What happens in each fault").
func TestMultiUnavailable(t *testing.T) {
	t.Parallel()
	nodes, gw := startFaultGateway(t)
	res := resourceName(t)
	rs := []string{res + "-1", res + "-2"}
	m := gw.do(t, http.MethodPost, "/locks", multiBody(rs, `,"ttl_ms":20000`))
	wantStatus(t, m, http.StatusCreated)
	waitHolders(t, nodes, rs[1], m.str(t, "token"), 5)
	for _, i := range []int{0, 1, 2} {
		nodes[i].Kill()
	}
	tok := []string{"Lock-Token", m.str(t, "token")}
	for _, r := range []*Resp{
		gw.do(t, http.MethodPatch, multiPath(rs), `{"ttl_ms":20000}`, tok...),
		gw.do(t, http.MethodDelete, multiPath(rs), "", tok...),
		gw.do(t, http.MethodPost, "/locks", multiBody([]string{res + "-3", res + "-4"}, "")),
	} {
		wantProblem(t, r, http.StatusServiceUnavailable, "quorum-unavailable")
		wantFast(t, r)
	}
}

// TestMultiNotOwnerHeldByOther: extend and release of the locks of several
// resources with a token that holds none of them, while another token holds
// one of them, are 409 not-owner with lock_state held-by-other (another
// token holds the lock: the critical section may not have been exclusive),
// also when that resource is not the first of the list (docs/safety.md
// "Guarantees and limits, in plain words"; openapi.yaml Problem.lock_state).
func TestMultiNotOwnerHeldByOther(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, startCluster(t, 3))
	free, held := resourceName(t), resourceName(t)
	lock(t, gw, held, `{"ttl_ms":20000}`)
	path := multiPath([]string{free, held})
	for _, method := range []string{http.MethodPatch, http.MethodDelete} {
		r := gw.do(t, method, path, "", "Lock-Token", clientToken(t))
		wantProblem(t, r, http.StatusConflict, "not-owner")
		if got := r.str(t, "lock_state"); got != "held-by-other" {
			t.Errorf("%s %s: lock_state %q, want held-by-other", method, path, got)
		}
	}
}
