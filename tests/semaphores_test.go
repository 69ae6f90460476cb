package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/checker"
)

// acquirePermit sends POST /semaphores/name with body.
func acquirePermit(t testing.TB, g *Gateway, name, body string, hdr ...string) *Resp {
	t.Helper()
	return g.do(t, http.MethodPost, "/semaphores/"+name, body, hdr...)
}

// permit acquires a permit and fails the test unless it got 201.
func permit(t testing.TB, g *Gateway, name, body string, hdr ...string) *Resp {
	t.Helper()
	r := acquirePermit(t, g, name, body, hdr...)
	wantStatus(t, r, http.StatusCreated)
	return r
}

func releasePermit(t testing.TB, g *Gateway, name, token string, hdr ...string) *Resp {
	t.Helper()
	return g.do(t, http.MethodDelete, "/semaphores/"+name, "", append([]string{"Lock-Token", token}, hdr...)...)
}

func inspectSemaphore(t testing.TB, g *Gateway, name string, hdr ...string) *Resp {
	t.Helper()
	return g.do(t, http.MethodGet, "/semaphores/"+name, "", hdr...)
}

// permitsHeld returns the permits GET lists, failing the test unless it is
// 200 and shows no token.
func permitsHeld(t testing.TB, g *Gateway, name string, hdr ...string) []any {
	t.Helper()
	r := inspectSemaphore(t, g, name, hdr...)
	wantStatus(t, r, http.StatusOK)
	if strings.Contains(string(r.Body), `"token"`) {
		t.Errorf("GET /semaphores/%s shows a token: %s", name, r.Body)
	}
	ps, _ := r.JSON["permits"].([]any)
	if got := r.num(t, "held"); got != int64(len(ps)) {
		t.Errorf("held %d, but %d permits listed: %s", got, len(ps), r.Body)
	}
	return ps
}

// TestSemaphores: a semaphore of limit 2 grants permits 0 and 1, refuses a
// third until a release serves it, refuses another limit (limit-mismatch)
// while permits are held, and takes client tokens idempotently, extends,
// releases and is inspected as docs/semaphores.md "The API" says
// (openapi.yaml /semaphores/{name}). One gateway over five nodes; every
// request is checked against openapi.yaml.
func TestSemaphores(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	gw := startGateway(t, nodes)

	t.Run("Limit", func(t *testing.T) {
		name := resourceName(t)
		a := permit(t, gw, name, `{"limit":2,"ttl_ms":30000,"owner":"a"}`)
		b := permit(t, gw, name, `{"limit":2,"ttl_ms":30000,"owner":"b"}`)
		if pa, pb := a.num(t, "permit"), b.num(t, "permit"); pa+pb != 1 || pa == pb {
			t.Errorf("permits %d and %d, want 0 and 1", pa, pb)
		}
		if fa, fb := a.num(t, "fencing_token"), b.num(t, "fencing_token"); fb <= fa {
			t.Errorf("fencing tokens %d then %d, want increasing", fa, fb)
		}
		if a.num(t, "limit") != 2 || a.str(t, "resource") != name || a.Header.Get("Location") != "/semaphores/"+name {
			t.Errorf("acquire: %v, Location %q", a, a.Header.Get("Location"))
		}
		wantCount(t, a, "locked_nodes", 3, 5)

		c := acquirePermit(t, gw, name, `{"limit":2}`)
		wantProblem(t, c, http.StatusConflict, "lock-held")
		if retryAfter(t, c) < 1 || c.num(t, "retry_after_ms") < 1000 {
			t.Errorf("every permit held: Retry-After %q, retry_after_ms %v", c.Header.Get("Retry-After"), c.JSON["retry_after_ms"])
		}
		wantNoSecret(t, c, a.str(t, "token"))

		// A waiter gets the permit released.
		got := make(chan *Resp, 1)
		go func() {
			r, err := gw.try(http.MethodPost, "/semaphores/"+name, `{"limit":2,"wait_ms":10000}`)
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		wantStatus(t, releasePermit(t, gw, name, a.str(t, "token")), http.StatusNoContent)
		r := <-got
		if r == nil {
			t.FailNow()
		}
		wantStatus(t, r, http.StatusCreated)
		if r.num(t, "permit") != a.num(t, "permit") || r.num(t, "fencing_token") <= b.num(t, "fencing_token") {
			t.Errorf("waiter got %v, want the released permit %d with a greater fence", r, a.num(t, "permit"))
		}
		for _, x := range []*Resp{b, r} {
			wantStatus(t, releasePermit(t, gw, name, x.str(t, "token")), http.StatusNoContent)
		}
	})

	t.Run("LimitMismatch", func(t *testing.T) {
		name := resourceName(t)
		a := permit(t, gw, name, `{"limit":3}`)
		before := keySnapshot(t, nodes)
		r := acquirePermit(t, gw, name, `{"limit":4}`)
		wantProblem(t, r, http.StatusConflict, "limit-mismatch")
		if r.num(t, "limit") != 3 || !strings.Contains(r.str(t, "detail"), "3") || !strings.Contains(r.str(t, "detail"), "4") {
			t.Errorf("limit-mismatch: %v, want limit 3 and both limits in the detail", r)
		}
		if after := keySnapshot(t, nodes); after != before {
			t.Errorf("limit-mismatch changed the nodes:\n%s\nthen\n%s", before, after)
		}
		wantStatus(t, releasePermit(t, gw, name, a.str(t, "token")), http.StatusNoContent)
		// Free again: any limit goes.
		b := permit(t, gw, name, `{"limit":4}`)
		wantStatus(t, releasePermit(t, gw, name, b.str(t, "token")), http.StatusNoContent)
	})

	t.Run("Idempotent", func(t *testing.T) {
		name, tok := resourceName(t), clientToken(t)
		body := fmt.Sprintf(`{"limit":3,"token":%q,"ttl_ms":10000}`, tok)
		a, b := permit(t, gw, name, body), permit(t, gw, name, body)
		if a.num(t, "permit") != b.num(t, "permit") || a.num(t, "fencing_token") != b.num(t, "fencing_token") || b.str(t, "token") != tok {
			t.Errorf("retried acquire %v, want the same permit and fence as %v", b, a)
		}
		if ps := permitsHeld(t, gw, name); len(ps) != 1 {
			t.Errorf("one token holds %d permits", len(ps))
		}
		wantStatus(t, releasePermit(t, gw, name, tok), http.StatusNoContent)
	})

	t.Run("ExtendRelease", func(t *testing.T) {
		name := resourceName(t)
		a := permit(t, gw, name, `{"limit":2,"ttl_ms":1000}`)
		tok := a.str(t, "token")
		e := gw.do(t, http.MethodPatch, "/semaphores/"+name, `{"ttl_ms":30000}`, "Lock-Token", tok)
		wantStatus(t, e, http.StatusOK)
		if e.num(t, "ttl_ms") != 30000 || e.num(t, "permit") != a.num(t, "permit") || e.num(t, "fencing_token") != a.num(t, "fencing_token") {
			t.Errorf("extend: %v", e)
		}
		wantStatus(t, releasePermit(t, gw, name, tok), http.StatusNoContent)
		wantStatus(t, releasePermit(t, gw, name, tok), http.StatusNoContent) // idempotent
		other := clientToken(t)
		wantProblem(t, releasePermit(t, gw, name, other), http.StatusConflict, "not-owner")
		wantProblem(t, gw.do(t, http.MethodPatch, "/semaphores/"+name, "", "Lock-Token", other), http.StatusConflict, "not-owner")
	})

	t.Run("Inspect", func(t *testing.T) {
		name := resourceName(t)
		r := inspectSemaphore(t, gw, name)
		wantStatus(t, r, http.StatusOK)
		if r.num(t, "limit") != 0 || r.num(t, "held") != 0 || r.str(t, "name") != name {
			t.Errorf("free semaphore: %v", r)
		}
		a := permit(t, gw, name, `{"limit":3,"owner":"worker-1","ttl_ms":20000}`)
		ps := permitsHeld(t, gw, name)
		if len(ps) != 1 {
			t.Fatalf("permits %v, want one", ps)
		}
		p, _ := ps[0].(map[string]any)
		if p["owner"] != "worker-1" || fmt.Sprint(p["fencing_token"]) != fmt.Sprint(a.num(t, "fencing_token")) ||
			fmt.Sprint(p["permit"]) != fmt.Sprint(a.num(t, "permit")) {
			t.Errorf("permit listed %v, want that of %v", p, a)
		}
		wantNoSecret(t, inspectSemaphore(t, gw, name), a.str(t, "token"))
		if h := gw.do(t, http.MethodHead, "/semaphores/"+name, ""); h.Status != http.StatusOK || len(h.Body) != 0 {
			t.Errorf("HEAD: %v", h)
		}
		wantStatus(t, releasePermit(t, gw, name, a.str(t, "token")), http.StatusNoContent)
	})
}

// TestSemaphoreBadInput: malformed requests (a limit missing, outside
// 1..256 or not an integer, unknown or null members, a TTL out of range, a
// bad name or token) are 400, an unknown method 405, and none changes
// anything on the nodes (docs/semaphores.md "The API"; openapi.yaml
// "Request bodies").
func TestSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes)
	before := keySnapshot(t, nodes)
	for _, body := range []string{
		"", `{}`, `{"limit":0}`, `{"limit":-1}`, `{"limit":257}`, `{"limit":1e40}`, `{"limit":1.5}`, `{"limit":"4"}`,
		`{"limit":null}`, `{"limit":2,"extra":1}`, `{"limit":2,"ttl_ms":1}`, `{"limit":2,"token":"short"}`, `[2]`,
	} {
		r := gw.do(t, http.MethodPost, "/semaphores/s", body, "Content-Type", "application/json")
		wantProblem(t, r, http.StatusBadRequest, "invalid-request")
	}
	wantProblem(t, acquirePermit(t, gw, "a%2Fb", `{"limit":2}`), http.StatusBadRequest, "invalid-request")
	wantProblem(t, releasePermit(t, gw, "s", "short"), http.StatusBadRequest, "invalid-request")
	wantProblem(t, gw.do(t, http.MethodPut, "/semaphores/s", ""), http.StatusMethodNotAllowed, "method-not-allowed")
	if after := keySnapshot(t, nodes); after != before {
		t.Errorf("bad input changed the nodes:\n%s\nthen\n%s", before, after)
	}
}

// TestSemaphoreNamespaces: the same semaphore name under two API keys of
// two namespaces is two semaphores, and a request without a key is 401
// (docs/semaphores.md "The API"; openapi.yaml "Authentication and
// namespaces").
func TestSemaphoreNamespaces(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	a, b := keygen(t, "svc-a", "team-a"), keygen(t, "svc-b", "team-b")
	gw := startGateway(t, nodes, "--api-keys-file", keysFile(t, a, b))
	name := resourceName(t)

	wantProblem(t, acquirePermit(t, gw, name, `{"limit":1}`), http.StatusUnauthorized, "unauthorized")
	pa := permit(t, gw, name, `{"limit":1}`, bearer(a.Key)...)
	pb := permit(t, gw, name, `{"limit":2}`, bearer(b.Key)...) // another namespace: no mismatch, not held
	wantProblem(t, acquirePermit(t, gw, name, `{"limit":1}`, bearer(a.Key)...), http.StatusConflict, "lock-held")
	if ps := permitsHeld(t, gw, name, bearer(b.Key)...); len(ps) != 1 {
		t.Errorf("team b sees %d permits, want its own one", len(ps))
	}
	wantProblem(t, releasePermit(t, gw, name, pa.str(t, "token"), bearer(b.Key)...), http.StatusConflict, "not-owner")
	wantStatus(t, releasePermit(t, gw, name, pa.str(t, "token"), bearer(a.Key)...), http.StatusNoContent)
	wantStatus(t, releasePermit(t, gw, name, pb.str(t, "token"), bearer(b.Key)...), http.StatusNoContent)
}

// TestRunSemaphore: `redlockd run --semaphore` gives CMD the semaphore and
// its permit, exits 75 when every permit is held and 64 when the permits
// are held with another limit (docs/clients.md "`redlockd run` (shell
// scripts, cron jobs)"; docs/semaphores.md "The API").
func TestRunSemaphore(t *testing.T) {
	t.Parallel()
	g := startGateway(t, startCluster(t, 3))
	name, gt := resourceName(t), newGate(t)
	run := func(env []string, args ...string) *proc {
		return runProc(t, env, append([]string{"run", "--url", g.URL, "--semaphore", name}, args...)...)
	}
	p := run([]string{"GATE=" + gt.Path}, "--limit", "1", "--", "sh", "-c",
		`echo "semaphore=$REDLOCKD_SEMAPHORE permit=$REDLOCKD_PERMIT fence=$REDLOCKD_FENCING_TOKEN"; echo ready; read x < "$GATE"`)
	p.waitLine("ready", 30*time.Second)
	if out := p.out.String(); !strings.Contains(out, fmt.Sprintf("semaphore=%s permit=0 fence=", name)) {
		t.Errorf("CMD's output %q lacks its semaphore and permit", out)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	full := run(nil, "--limit", "1", "--fail-if-locked", "--", "touch", marker)
	full.wantExit(runLockHeld, 30*time.Second)
	mismatch := run(nil, "--limit", "2", "--", "touch", marker)
	mismatch.wantExit(runUsage, 30*time.Second)
	if !strings.Contains(mismatch.errs.String(), "--limit 1, not 2") {
		t.Errorf("stderr %q does not explain the limit mismatch", mismatch.errs.String())
	}
	wantNoFile(t, marker, "a full semaphore or another limit")
	gt.open()
	p.wantExit(0, 30*time.Second)
	if ps := permitsHeld(t, g, name); len(ps) != 0 {
		t.Errorf("permits %v held after run ended", ps)
	}
}

// TestSemaphoreFencesUnique: acquires of one semaphore's permits sent
// together through two gateways never get the same fencing token, and one
// sent after another's 201 was read gets a greater one (docs/semaphores.md
// "Fencing tokens across permits").
func TestSemaphoreFencesUnique(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	// A generous node timeout: the subject is fences, on a busy machine too.
	gws := []*Gateway{startGateway(t, nodes, "--node-timeout", "500ms"), startGateway(t, nodes, "--node-timeout", "500ms")}
	name := resourceName(t)
	const limit, rounds = 4, 40
	t0 := time.Now()
	var mu sync.Mutex
	var ws []checker.Window
	for round := range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range limit {
			wg.Go(func() {
				<-start
				g := gws[i%2]
				sent := time.Since(t0)
				r, err := g.try(http.MethodPost, "/semaphores/"+name, `{"limit":4,"ttl_ms":5000,"wait_ms":5000}`)
				if err != nil || r.Status != http.StatusCreated {
					t.Errorf("round %d: acquire %d: %v %v", round, i, r, err)
					return
				}
				w := checker.Window{ID: fmt.Sprintf("r%d#%d", round, i), Resource: name, Fence: r.num(t, "fencing_token"), Sent: sent, Start: time.Since(t0)}
				if r, err := g.try(http.MethodDelete, "/semaphores/"+name, "", "Lock-Token", r.str(t, "token")); err != nil || r.Status != http.StatusNoContent {
					t.Errorf("round %d: release %d: %v %v", round, i, r, err)
				}
				w.End = time.Since(t0) // at most limit holders: the window may reach past the release
				mu.Lock()
				ws = append(ws, w)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	// The checker's rules of a semaphore's fences: handed out once, and
	// greater than those of every grant read before the acquire was sent.
	if vs, _ := checker.Check(ws, limit); len(vs) > 0 {
		t.Fatalf("%d violations:\n%s", len(vs), checker.Report(vs, 10))
	}
}

// TestSemaphoreFIFOLimit: with limit 2, waiters are served first come,
// first served up to the two that try at once: when a waiter is served, at
// most one waiter that came before it is still waiting, even while every
// served waiter releases at once (docs/semaphores.md "The API", Waiting).
// The order of service is the order of the grants' fencing tokens (unique
// and increasing), not the order their answers reach the test's
// goroutines.
func TestSemaphoreFIFOLimit(t *testing.T) {
	t.Parallel()
	const limit, n = 2, 8
	gw := startGateway(t, startCluster(t, 3))
	url := "/semaphores/" + resourceName(t)
	var holders []string
	for range limit {
		r := gw.do(t, http.MethodPost, url, `{"limit":2,"ttl_ms":20000}`)
		wantStatus(t, r, http.StatusCreated)
		holders = append(holders, r.str(t, "token"))
	}
	fences := make([]int64, n) // by waiter, in the order they queued
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := gw.try(http.MethodPost, url, `{"limit":2,"ttl_ms":20000,"wait_ms":20000}`)
			if err != nil || r.Status != http.StatusCreated {
				t.Errorf("waiter %d: %v %v", i, r, err)
				return
			}
			fence, _ := r.JSON["fencing_token"].(json.Number)
			fences[i], _ = fence.Int64()
			token, _ := r.JSON["token"].(string)
			if r, err = gw.try(http.MethodDelete, url, "", "Lock-Token", token); err != nil || r.Status != http.StatusNoContent {
				t.Errorf("waiter %d: release: %v %v", i, r, err)
			}
		})
		eventually(t, 10*time.Second, "the waiter in the queue", func() bool {
			return scrapeMetrics(t, gw).value("redlockd_waiters") == float64(i+1)
		})
	}
	for _, tok := range holders {
		wantStatus(t, gw.do(t, http.MethodDelete, url, "", "Lock-Token", tok), http.StatusNoContent)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := range n {
		var waiting []int // came before i, served after it
		for j := range i {
			if fences[j] > fences[i] {
				waiting = append(waiting, j)
			}
		}
		if len(waiting) > limit-1 {
			t.Errorf("waiter %d served while waiters %v, who came before it, waited (fencing tokens by waiter %v)", i, waiting, fences)
		}
	}
}
