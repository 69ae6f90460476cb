package tests

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunShortGatewayMaxWait runs `redlockd run` against a gateway whose
// --max-wait (1s) is below run's --wait, as docs/operations.md advises
// behind a load balancer with a short idle timeout: run still waits up to
// its --wait for the lock, and a value that the gateway refuses for another
// reason is still a usage error.
func TestRunShortGatewayMaxWait(t *testing.T) {
	g := startGateway(t, startCluster(t, 3), "--max-wait", "1s")
	run := func(args ...string) *proc {
		return runProc(t, nil, append([]string{"run", "--url", g.URL}, args...)...)
	}

	// A free lock with the default --wait (60s).
	res := resourceName(t)
	run("--resource", res, "--", "true").wantExit(0, 30*time.Second)
	wantNotHeld(t, inspectAnswered(t, g, res))

	// A lock held by another until it expires, 2.5s later.
	held := time.Now()
	lock(t, g, res, `{"ttl_ms":2500}`)
	p := run("--resource", res, "--wait", "20s", "--", "true")
	p.wantExit(0, 30*time.Second)
	if d := p.exitedAt.Sub(held); d < 2*time.Second {
		t.Errorf("run got the lock %v after it was taken, before the holder's expired", d)
	}

	// A TTL above the gateway's max TTL: refused at once.
	p = run("--resource", res, "--ttl", "2m", "--", "true")
	p.wantExit(runUsage, 30*time.Second)
	if msg := p.errs.String(); !strings.Contains(msg, "ttl_ms must be within") {
		t.Errorf("stderr %q does not say why the gateway refused", msg)
	}
}

// TestRunNestedEnv runs `redlockd run --semaphore` inside `redlockd run
// --resource` and the other way round: the inner CMD gets the variables of
// what the inner run holds only, none left from the outer run that would
// pair its name with the inner run's token.
func TestRunNestedEnv(t *testing.T) {
	g := startGateway(t, startCluster(t, 3))
	res, sem := resourceName(t), resourceName(t)+"-sem"
	show := `echo "resource=${REDLOCKD_RESOURCE-unset} semaphore=${REDLOCKD_SEMAPHORE-unset} permit=${REDLOCKD_PERMIT-unset}"`
	lockArgs := []string{"run", "--url", g.URL, "--resource", res, "--"}
	semArgs := []string{"run", "--url", g.URL, "--semaphore", sem, "--limit", "1", "--"}
	for want, args := range map[string][]string{
		"resource=unset semaphore=" + sem + " permit=0":     append(append(lockArgs, binPath), append(semArgs, "sh", "-c", show)...),
		"resource=" + res + " semaphore=unset permit=unset": append(append(semArgs, binPath), append(lockArgs, "sh", "-c", show)...),
	} {
		p := runProc(t, nil, args...)
		p.wantExit(0, 30*time.Second)
		if got := strings.TrimSpace(p.out.String()); got != want {
			t.Errorf("%q: inner CMD got %q, want %q", args, got, want)
		}
	}
}

// TestRunTooManyWaiters runs `redlockd run --wait` while every waiting slot
// of the gateway is taken: the 503 too-many-waiters is tried again while
// --wait lasts, as docs/clients.md says of a 503, and run gets the lock
// once its holder's expired.
func TestRunTooManyWaiters(t *testing.T) {
	g := startGateway(t, startCluster(t, 3), "--max-waiters", "1")
	busy, res := resourceName(t), resourceName(t)
	tok := lock(t, g, busy, `{"ttl_ms":30000}`).str(t, "token")
	waiter := make(chan error, 1)
	go func() {
		_, err := g.try(http.MethodPost, "/locks/"+busy, `{"wait_ms":20000}`)
		waiter <- err
	}()
	eventually(t, 10*time.Second, "the waiter to wait", func() bool { return scrapeMetrics(t, g).value("redlockd_waiters") == 1 })

	lock(t, g, res, `{"ttl_ms":1500}`)
	p := runProc(t, nil, "run", "--url", g.URL, "--resource", res, "--wait", "15s", "--", "true")
	p.wantExit(0, 30*time.Second)

	wantStatus(t, release(t, g, busy, tok), http.StatusNoContent)
	if err := <-waiter; err != nil {
		t.Errorf("the waiter: %v", err)
	}
}

// TestRunRetriesUnreachable: `redlockd run` tries again while --wait lasts
// when the gateway does not answer, as behind a proxy that answers 502
// while the gateway restarts (no problem body), and says so once; a 4xx
// that is not a gateway's, as a TLS gateway asked in plain HTTP answers, is
// a usage error (64), not "unavailable" (69).
func TestRunRetriesUnreachable(t *testing.T) {
	g := startGateway(t, startCluster(t, 3))
	target, err := url.Parse(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	gw := httputil.NewSingleHostReverseProxy(target)
	var calls atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "upstream restarting", http.StatusBadGateway)
			return
		}
		gw.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	res := resourceName(t)
	p := runProc(t, nil, "run", "--url", proxy.URL, "--resource", res, "--wait", "20s", "--", "true")
	p.wantExit(0, 30*time.Second)
	if n := calls.Load(); n < 3 {
		t.Errorf("%d requests reached the proxy, want the two 502s and the acquire after them", n)
	}
	if msg := p.errs.String(); strings.Count(msg, "trying again while --wait lasts") != 1 {
		t.Errorf("stderr %q does not say once that run tries again", msg)
	}
	wantNotHeld(t, inspectAnswered(t, g, res))

	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	p = runProc(t, nil, "run", "--url", "http://"+tlsSrv.Listener.Addr().String(), "--resource", res, "--wait", "20s", "--", "true")
	p.wantExit(runUsage, 30*time.Second)
	if msg := p.errs.String(); !strings.Contains(msg, "check --url") {
		t.Errorf("stderr %q does not point at --url", msg)
	}
}
