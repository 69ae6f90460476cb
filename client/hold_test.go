package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
			const ttl = 1500 * time.Millisecond
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
			h, err := c.Hold(ctx, target, client.HoldOptions{TTL: time.Second})
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

// TestHoldGatewayRestart (fault a): workers hold several resources (in
// either order) through a client with two gateways' URLs while the first
// gateway restarts, twice, down for longer than a validity: no operation
// fails within the wait — the acquire retries, the extensions and the
// releases move to the other gateway (docs/clients.md "Go").
func TestHoldGatewayRestart(t *testing.T) {
	nodes := startNodes(t, 3)
	g1, g2 := startGatewayProc(t, nodes, 0), startGatewayProc(t, nodes, 0)
	c := newClient(t, g1.URL, client.Options{OtherURLs: []string{g2.URL}})
	ctx := context.Background()
	a, b := resourceName(t), resourceName(t)
	const ttl = 2 * time.Second

	var ops, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		failed.Add(1)
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		resources := []string{a, b}
		if w%2 == 1 {
			resources = []string{b, a}
		}
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ops.Add(1)
				h, err := c.Hold(ctx, client.Locks{Resources: resources}, client.HoldOptions{TTL: ttl, Wait: 30 * time.Second})
				if err != nil {
					fail("Hold: %v", err)
					continue
				}
				select {
				case <-h.Done():
				case <-time.After(ttl): // the work, long enough to be extended
				}
				if err := h.Release(ctx); err != nil {
					fail("Release: %v", err)
				}
			}
		})
	}
	for range 2 {
		time.Sleep(time.Second)
		g1.Stop()
		time.Sleep(2 * ttl) // down longer than a validity: only the other gateway can extend
		g1 = startGatewayProc(t, nodes, g1.port)
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d operations, %d failed", ops.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Errorf("%d of %d operations failed: %s", failed.Load(), ops.Load(), strings.Join(failures, "; "))
	}
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
			h, err := c.Hold(ctx, tg, client.HoldOptions{TTL: 10 * time.Second, Wait: 20 * time.Second,
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
