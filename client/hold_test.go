package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlockd/redlockd/client"
)

// targets returns one target of each kind, with names unique to t.
func targets(t *testing.T) map[string]client.Target {
	return map[string]client.Target{
		"Write":   client.WriteLock{Resource: resourceName(t)},
		"Read":    client.ReadLock{Resource: resourceName(t)},
		"Several": client.Locks{Resources: []string{resourceName(t), resourceName(t)}},
		"Permit":  client.SemaphorePermit{Name: resourceName(t), Limit: 1},
	}
}

// heldBy reports whether target is held now with fences (asked with
// Inspect and InspectSemaphore).
func heldBy(t *testing.T, c *client.Client, target client.Target, fences []int64) bool {
	t.Helper()
	ctx := context.Background()
	var got []int64
	switch tg := target.(type) {
	case client.WriteLock, client.ReadLock:
		info, err := c.Inspect(ctx, tgName(tg))
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if info.Held {
			got = []int64{info.Fence}
		}
	case client.Locks:
		for _, r := range tg.Resources {
			info, err := c.Inspect(ctx, r)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			if info.Held {
				got = append(got, info.Fence)
			}
		}
	case client.SemaphorePermit:
		info, err := c.InspectSemaphore(ctx, tg.Name)
		if err != nil {
			t.Fatalf("InspectSemaphore: %v", err)
		}
		for _, p := range info.Permits {
			got = append(got, p.Fence)
		}
	}
	return slices.Equal(got, fences)
}

// TestHold holds each kind of target past several TTLs (the extensions
// every TTL/3 keep it), then releases it: Done is closed, Err is
// ErrReleased and the target is free (docs/clients.md, rules 3 and 4).
// Time is the subject: the hold must outlive its TTL.
func TestHold(t *testing.T) {
	g := startGateway(t, 3, nil)
	c := newClient(t, g.URL, client.Options{})
	for name, target := range targets(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const ttl = 3 * time.Second // an extension's timeout, ttl/3, is met by a starved process
			h, err := c.Hold(context.Background(), target, client.HoldOptions{TTL: ttl, Owner: "hold-test"})
			if err != nil {
				t.Fatalf("Hold(%v): %v", target, err)
			}
			n := 1
			if l, ok := target.(client.Locks); ok {
				n = len(l.Resources)
			}
			if !validToken(h.Token()) || h.Permit() != 0 || len(h.Fences()) != n || h.Fence() != h.Fences()[0] {
				t.Errorf("Hold: token valid %v, fences %v, permit %d", validToken(h.Token()), h.Fences(), h.Permit())
			}
			fences := h.Fences()
			time.Sleep(3 * ttl)
			if err := h.Err(); err != nil {
				t.Fatalf("after 3 TTLs: Err = %v, want the hold kept", err)
			}
			if !heldBy(t, c, target, fences) || !h.Until().After(time.Now()) {
				t.Fatalf("after 3 TTLs: %v not held with fences %v (until %v)", target, fences, time.Until(h.Until()))
			}
			if err := h.Release(context.Background()); err != nil {
				t.Fatalf("Release: %v", err)
			}
			select {
			case <-h.Done():
			default:
				t.Fatal("Done not closed after Release")
			}
			if err := h.Err(); !errors.Is(err, client.ErrReleased) || !errors.Is(context.Cause(h.Context()), client.ErrReleased) {
				t.Errorf("Err after Release = %v, want ErrReleased", err)
			}
			if heldBy(t, c, target, fences) {
				t.Errorf("%v still held after Release", target)
			}
			if err := h.Release(context.Background()); err != nil {
				t.Errorf("second Release: %v, want the first's nil", err)
			}
		})
	}
}

// TestHoldWaitExtendsAtOnce: an acquire that waited has lost part of its
// validity to the wait, so Hold extends at once: it returns with about a
// full TTL ahead (docs/clients.md, rule 1).
func TestHoldWaitExtendsAtOnce(t *testing.T) {
	g := startGateway(t, 3, nil)
	c := newClient(t, g.URL, client.Options{})
	ctx := context.Background()
	res := resourceName(t)
	other, err := c.Acquire(ctx, res, client.AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second
	go func() {
		time.Sleep(ttl * 5 / 6) // the waiter's first validity is then almost gone
		_ = c.Release(ctx, res, other.Token)
	}()
	h, err := c.Hold(ctx, client.WriteLock{Resource: res}, client.HoldOptions{TTL: ttl, Wait: 20 * time.Second})
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	defer h.Release(ctx)
	if left := time.Until(h.Until()); left < ttl/2 {
		t.Errorf("Hold returned with %v of validity after waiting, want a fresh window of about %v", left, ttl)
	}
}

// TestHoldLostNotOwner: a 409 not-owner on an extension (the target was
// released behind the hold's back) ends the hold: Done is closed, Err is
// ErrLost and ErrNotOwner with the gateway's request id, and Release
// reports it (docs/clients.md, rules 3 and 4).
func TestHoldLostNotOwner(t *testing.T) {
	g := startGateway(t, 3, nil)
	c := newClient(t, g.URL, client.Options{})
	ctx := context.Background()
	for name, target := range targets(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, err := c.Hold(ctx, target, client.HoldOptions{TTL: 6 * time.Second}) // lost by the release below, not by expiry
			if err != nil {
				t.Fatalf("Hold: %v", err)
			}
			// Released with the hold's token by someone else.
			if err := otherRelease(ctx, c, target, h.Token()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-h.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("Done not closed within 30s of the target's release")
			}
			err = h.Err()
			wantIs(t, err, client.ErrLost, client.ErrNotOwner)
			if pe := wantProblem(t, err, http.StatusConflict, "not-owner"); pe.RequestID == "" {
				t.Errorf("loss without the request id: %+v", pe)
			}
			if !errors.Is(context.Cause(h.Context()), client.ErrLost) {
				t.Errorf("Context's cause %v, want ErrLost", context.Cause(h.Context()))
			}
			wantIs(t, h.Release(ctx), client.ErrLost, client.ErrNotOwner)
		})
	}
}

func otherRelease(ctx context.Context, c *client.Client, target client.Target, token string) error {
	switch tg := target.(type) {
	case client.WriteLock:
		return c.Release(ctx, tg.Resource, token)
	case client.ReadLock:
		return c.Release(ctx, tg.Resource, token)
	case client.Locks:
		return c.ReleaseMulti(ctx, tg.Resources, token)
	case client.SemaphorePermit:
		return c.ReleasePermit(ctx, tg.Name, token)
	}
	return fmt.Errorf("unknown target %T", target)
}

// TestHoldLostMajorityPaused (fault b): a hold of several resources whose
// nodes, a majority of them, are paused for longer than the validity
// reports the loss: the extensions got 503s (the gateway's last answer is
// the cause), never a successful one, until the validity ended
// (docs/clients.md, rule 3). Time is the subject.
func TestHoldLostMajorityPaused(t *testing.T) {
	nodes := startNodes(t, 3)
	// The gateway answers for paused nodes well within the validity.
	g := startGatewayProc(t, nodes, 0, "--node-timeout", "500ms")
	c := newClient(t, g.URL, client.Options{})
	ctx := context.Background()
	h, err := c.Hold(ctx, client.Locks{Resources: []string{resourceName(t), resourceName(t), resourceName(t)}},
		client.HoldOptions{TTL: 3 * time.Second, Wait: 20 * time.Second})
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	for _, n := range nodes[:2] {
		n.Pause()
		defer n.Resume()
	}
	select {
	case <-h.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("Done not closed within 60s of pausing a majority of nodes")
	}
	err = h.Err()
	wantIs(t, err, client.ErrLost, client.ErrQuorumUnavailable)
	if errors.Is(err, client.ErrNotOwner) || errors.Is(err, client.ErrReleased) {
		t.Errorf("Err = %v: not a loss by the end of the validity", err)
	}
	if time.Now().Before(h.Until()) {
		t.Errorf("lost %v before the end of the validity", time.Until(h.Until()))
	}
	wantIs(t, h.Release(ctx), client.ErrLost)
}

// TestHoldGatewayRestart (fault a), the fault run of every client's
// several-resources hold (clients/python/tests/test_faults.py is
// Python's): workers make transfers, each under a hold of two of four
// accounts (in either order), through a client with two gateways' URLs,
// while the faults come one after another, each awaited by more
// transfers: each gateway restarted, then each stopped for longer than a
// validity and started again; a node paused then resumed, a node killed
// then restarted empty — never a majority of nodes down at once. No
// operation fails within the wait — the acquire retries, the extensions
// and the releases move to the other gateway (docs/clients.md "Go") — no
// two holds of an account overlap, and each account's fences strictly
// increase.
func TestHoldGatewayRestart(t *testing.T) {
	nodes := startNodes(t, 3)
	gws := []*gatewayProc{startGatewayProc(t, nodes, 0), startGatewayProc(t, nodes, 0)}
	answers := &failedAnswers{next: http.DefaultTransport}
	c := newClient(t, gws[0].URL, client.Options{OtherURLs: []string{gws[1].URL}, HTTPClient: &http.Client{Transport: answers}})
	ctx := context.Background()
	accounts := []string{resourceName(t), resourceName(t), resourceName(t), resourceName(t)}
	const ttl = 3 * time.Second // as in the JS and Python fault runs: an extension's timeout, ttl/3, is met by a starved process

	var (
		mu       sync.Mutex
		ops      int
		failures []string
		inside   = map[string]bool{} // the accounts under a transfer now
		fences   = map[string][]int64{}
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	transfer := func(pair []string) {
		defer func() { mu.Lock(); ops++; mu.Unlock() }()
		h, err := c.Hold(ctx, client.Locks{Resources: pair}, client.HoldOptions{TTL: ttl, Wait: 30 * time.Second, Owner: "go-transfer"})
		if err != nil {
			fail("Hold %v: %v", pair, err)
			return
		}
		mu.Lock()
		for i, r := range pair {
			if inside[r] {
				failures = append(failures, fmt.Sprintf("%v entered while %s was held", pair, r))
			}
			inside[r] = true
			fences[r] = append(fences[r], h.Fences()[i])
		}
		mu.Unlock()
		select { // the transfer, through an extension (every ttl/3)
		case <-h.Done():
		case <-time.After(ttl / 2):
		}
		if err := h.Err(); err != nil {
			fail("%v lost during the transfer: %v", pair, err)
		}
		mu.Lock()
		for _, r := range pair {
			delete(inside, r)
		}
		mu.Unlock()
		if err := h.Release(ctx); err != nil {
			fail("Release %v: %v", pair, err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		rnd := rand.New(rand.NewPCG(uint64(w), 32))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rnd.IntN(len(accounts))
				j := (i + 1 + rnd.IntN(len(accounts)-1)) % len(accounts)
				transfer([]string{accounts[i], accounts[j]})
			}
		})
	}
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer func() { // after a failed step, which may have left a node paused
		for _, n := range nodes {
			n.Resume()
		}
		halt()
	}()
	// progress awaits n more transfers (the workers keep going).
	progress := func(what string, n int) {
		t.Helper()
		mu.Lock()
		want := ops + n
		mu.Unlock()
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			got := ops
			mu.Unlock()
			if got >= want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d transfers within 90s of %s", got+n-want, n, what)
			}
		}
	}
	restart := func(i int) func() {
		return func() { gws[i].Stop(); gws[i] = startGatewayProc(t, nodes, gws[i].port) }
	}
	progress("the start", 5)
	for _, step := range []struct {
		name string
		do   func()
		down bool // a gateway or node stays down at least 2 TTLs, through transfers
	}{
		{"restart gateway 0", restart(0), false},
		{"restart gateway 1", restart(1), false},
		{"stop gateway 0", func() { gws[0].Stop() }, true},
		{"start gateway 0", func() { gws[0] = startGatewayProc(t, nodes, gws[0].port) }, false},
		{"stop gateway 1", func() { gws[1].Stop() }, true},
		{"start gateway 1", func() { gws[1] = startGatewayProc(t, nodes, gws[1].port) }, false},
		{"pause node 0", nodes[0].Pause, true},
		{"resume node 0", nodes[0].Resume, false},
		{"kill node 2", nodes[2].Kill, true},
		{"restart node 2", func() { nodes[2].Restart(t) }, false},
	} {
		at := time.Now()
		step.do()
		progress(step.name, 6)
		if step.down {
			time.Sleep(time.Until(at.Add(2 * ttl))) // down longer than a validity: time is the subject
		}
	}
	progress("the last step", 3)
	halt()

	mu.Lock()
	defer mu.Unlock()
	if len(failures) != 0 {
		t.Errorf("%d of %d transfers failed: %s", len(failures), ops, strings.Join(failures, "; "))
	}
	if answers.n.Load() < 2 {
		t.Errorf("%d answers lost or 5xx: no request met a stopped gateway", answers.n.Load())
	}
	for _, a := range accounts {
		if f := fences[a]; !slices.IsSorted(f) || len(slices.Compact(slices.Clone(f))) != len(f) {
			t.Errorf("%s: fences not strictly increasing: %v", a, f)
		}
	}
	t.Logf("fault run: %d transfers, 2 gateways restarted and stopped, nodes paused, killed and restarted, "+
		"%d answers lost or 5xx, %d failed operations", ops, answers.n.Load(), len(failures))
}

// failedAnswers is an http.RoundTripper that counts the requests that got
// no answer or a 5xx.
type failedAnswers struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (f *failedAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := f.next.RoundTrip(req)
	if err != nil || res.StatusCode >= 500 {
		f.n.Add(1)
	}
	return res, err
}

// TestHoldRetriedAcquireKeepsFence (fault c): the answer to the first
// acquire is lost (the connection closes after the gateway granted it);
// Hold tries again with the same client-chosen token and gets the same
// fences, which the gateway did not advance (docs/clients.md, "Go").
func TestHoldRetriedAcquireKeepsFence(t *testing.T) {
	g := startGateway(t, 3, nil)
	target, err := url.Parse(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	lost := map[string][]int64{} // the fences of each first answer, by path
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		_, seen := lost[r.URL.Path]
		mu.Unlock()
		if r.Method != http.MethodPost || seen {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		mu.Lock()
		lost[r.URL.Path] = fencesOf(t, rec.Body.Bytes())
		mu.Unlock()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close() // the answer is lost
	}))
	defer proxy.Close()
	c := newClient(t, proxy.URL, client.Options{})
	ctx := context.Background()
	for name, tg := range targets(t) {
		t.Run(name, func(t *testing.T) {
			var retried []error
			h, err := c.Hold(ctx, tg, client.HoldOptions{TTL: 30 * time.Second, Wait: 20 * time.Second,
				OnRetry: func(err error) { retried = append(retried, err) }})
			if err != nil {
				t.Fatalf("Hold: %v", err)
			}
			defer h.Release(ctx)
			if len(retried) != 1 || !errors.Is(retried[0], client.ErrUnreachable) {
				t.Errorf("retried after %v, want once after ErrUnreachable", retried)
			}
			mu.Lock()
			var first []int64
			for path, f := range lost {
				if strings.Contains(path, tgName(tg)) || (path == "/locks" && name == "Several") {
					first = f
				}
			}
			mu.Unlock()
			if len(first) == 0 || !slices.Equal(h.Fences(), first) {
				t.Errorf("fences %v after the retry, want the lost answer's %v", h.Fences(), first)
			}
			if !heldBy(t, c, tg, first) {
				t.Errorf("%v not held with the first fences %v", tg, first)
			}
		})
	}
}

// tgName is the name in a target's acquire path ("" for Locks).
func tgName(tg client.Target) string {
	switch tg := tg.(type) {
	case client.WriteLock:
		return tg.Resource
	case client.ReadLock:
		return tg.Resource
	case client.SemaphorePermit:
		return tg.Name
	}
	return "\x00"
}

// fencesOf returns the fencing tokens of an acquire's answer.
func fencesOf(t *testing.T, body []byte) []int64 {
	var b struct {
		FencingToken int64 `json:"fencing_token"`
		Resources    []struct {
			FencingToken int64 `json:"fencing_token"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Errorf("acquire answer %s: %v", body, err)
	}
	if len(b.Resources) == 0 {
		return []int64{b.FencingToken}
	}
	var f []int64
	for _, r := range b.Resources {
		f = append(f, r.FencingToken)
	}
	return f
}

// TestOtherURLs: a call that gets no answer hands the next call to the
// next gateway of Options.OtherURLs, whatever its path prefix.
func TestOtherURLs(t *testing.T) {
	g := startGateway(t, 3, func(next http.Handler) http.Handler { return http.StripPrefix("/p", next) })
	down := "http://" + closedAddr(t) + "/q/"
	c := newClient(t, down, client.Options{OtherURLs: []string{g.URL + "/p"}})
	ctx := context.Background()
	res := resourceName(t)
	_, err := c.Acquire(ctx, res, client.AcquireOptions{})
	wantIs(t, err, client.ErrUnreachable)
	l, err := c.Acquire(ctx, res, client.AcquireOptions{})
	if err != nil {
		t.Fatalf("second Acquire, to the other gateway: %v", err)
	}
	if err := c.Release(ctx, res, l.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := client.New(g.URL, client.Options{OtherURLs: []string{"ftp://x"}}); err == nil {
		t.Error("New with a bad other URL: no error")
	}
}

// closedAddr returns a 127.0.0.1 address where nothing listens.
func closedAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", freePort(t))
}
