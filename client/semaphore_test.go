package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/server"
)

// permitLocker is a server.Locker whose semaphore methods answer as set
// here; it has no lock methods (calling one panics).
type permitLocker struct {
	server.Locker
	acquire func(name string, o redlock.PermitOptions) (redlock.Permit, error)
	info    redlock.SemaphoreInfo
}

func (l *permitLocker) AcquirePermit(_ context.Context, name string, o redlock.PermitOptions) (redlock.Permit, error) {
	return l.acquire(name, o)
}

func (l *permitLocker) ExtendPermit(_ context.Context, _, name, token string, ttl time.Duration) (redlock.Permit, error) {
	return redlock.Permit{Lock: redlock.Lock{Resource: name, Token: token, Fence: 7, TTL: ttl, Validity: ttl}, Limit: 2, Index: 1}, nil
}

func (l *permitLocker) ReleasePermit(context.Context, string, string, string) error {
	return redlock.ErrLockExpired
}

func (l *permitLocker) InspectSemaphore(context.Context, string, string) (redlock.SemaphoreInfo, error) {
	return l.info, nil
}

// TestSemaphoreClient maps the gateway's semaphore answers, from a gateway
// over a fake Locker, to the typed API.
func TestSemaphoreClient(t *testing.T) {
	l := &permitLocker{info: redlock.SemaphoreInfo{Limit: 2, Permits: []redlock.PermitInfo{{Index: 1, Owner: "w", Fence: 7, Remaining: time.Second, HeldNodes: 3}}}}
	hs := httptest.NewServer(server.New(server.Config{Locker: l}).Handler())
	defer hs.Close()
	c := newClient(t, hs.URL, client.Options{})
	ctx := context.Background()
	token := clientToken()

	l.acquire = func(name string, o redlock.PermitOptions) (redlock.Permit, error) {
		if name != "sem" || o.Limit != 2 || o.TTL != 5*time.Second || o.Wait != time.Second || o.Token != token || o.Owner != "w" {
			t.Errorf("AcquirePermit(%q, %+v)", name, o)
		}
		return redlock.Permit{Lock: redlock.Lock{Resource: name, Token: o.Token, Fence: 7, TTL: o.TTL, Validity: o.TTL, Until: time.Now().Add(o.TTL),
			Nodes: 5, Quorum: 3, Locked: 3}, Limit: o.Limit, Index: 1}, nil
	}
	p, err := c.AcquirePermit(ctx, "sem", client.PermitOptions{Limit: 2, TTL: 5 * time.Second, Wait: time.Second, Token: token, Owner: "w"})
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	if p.Resource != "sem" || p.Token != token || p.Fence != 7 || p.Limit != 2 || p.Index != 1 || p.TTL != 5*time.Second || p.Quorum != 3 {
		t.Errorf("AcquirePermit = %+v", p)
	}
	if p, err := c.ExtendPermit(ctx, "sem", token, 3*time.Second); err != nil || p.Index != 1 || p.TTL != 3*time.Second {
		t.Errorf("ExtendPermit = %+v, %v", p, err)
	}
	wantIs(t, c.ReleasePermit(ctx, "sem", token), client.ErrLockExpired, client.ErrNotOwner)
	info, err := c.InspectSemaphore(ctx, "sem")
	if err != nil || info.Name != "sem" || info.Limit != 2 || len(info.Permits) != 1 ||
		info.Permits[0] != (client.HeldPermit{Index: 1, Owner: "w", Fence: 7, Remaining: time.Second, HeldNodes: 3}) {
		t.Errorf("InspectSemaphore = %+v, %v", info, err)
	}

	l.acquire = func(string, redlock.PermitOptions) (redlock.Permit, error) {
		return redlock.Permit{}, &redlock.LimitError{Limit: 3}
	}
	_, err = c.AcquirePermit(ctx, "sem", client.PermitOptions{Limit: 2})
	wantIs(t, err, client.ErrLimitMismatch)
	if pe := wantProblem(t, err, http.StatusConflict, "limit-mismatch"); pe.Limit != 3 || !strings.Contains(pe.Detail, "3") {
		t.Errorf("limit-mismatch problem %+v, want Limit 3", pe)
	}
	l.acquire = func(string, redlock.PermitOptions) (redlock.Permit, error) {
		return redlock.Permit{}, &redlock.HeldError{Remaining: 2 * time.Second}
	}
	_, err = c.AcquirePermit(ctx, "sem", client.PermitOptions{Limit: 2})
	var held *client.HeldError
	if !errors.As(err, &held) || held.Remaining < 2*time.Second {
		t.Errorf("every permit held: %v, want a *HeldError with the holder's remaining time", err)
	}

	// The client refuses these itself.
	var pe *client.ProblemError
	for name, err := range map[string]error{
		"Name":        func() error { _, err := c.AcquirePermit(ctx, "a/b", client.PermitOptions{Limit: 2}); return err }(),
		"NoLimit":     func() error { _, err := c.AcquirePermit(ctx, "sem", client.PermitOptions{}); return err }(),
		"LimitTooBig": func() error { _, err := c.AcquirePermit(ctx, "sem", client.PermitOptions{Limit: 257}); return err }(),
		"Token": func() error {
			_, err := c.AcquirePermit(ctx, "sem", client.PermitOptions{Limit: 2, Token: "x"})
			return err
		}(),
		"NegativeWait": func() error {
			_, err := c.AcquirePermit(ctx, "sem", client.PermitOptions{Limit: 2, Wait: -1})
			return err
		}(),
		"ExtendToken": func() error { _, err := c.ExtendPermit(ctx, "sem", "", time.Second); return err }(),
		"ReleaseName": c.ReleasePermit(ctx, "..", token),
		"InspectName": func() error { _, err := c.InspectSemaphore(ctx, ""); return err }(),
	} {
		if !errors.Is(err, client.ErrInvalid) || errors.As(err, &pe) {
			t.Errorf("%s: %v, want client.ErrInvalid without a request", name, err)
		}
	}
}

// TestPermitLifecycle takes the two permits of a semaphore through a real
// gateway, finds the third refused, and checks mismatch, idempotence,
// waiting, extension and release. It needs package redlock's semaphores.
func TestPermitLifecycle(t *testing.T) {
	g := startGateway(t, 5, nil)
	c := newClient(t, g.URL, client.Options{})
	ctx := context.Background()
	sem, token := resourceName(t), clientToken()

	p0, err := c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: 2, TTL: 10 * time.Second, Token: token, Owner: "a"})
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	p1, err := c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: 2, TTL: 10 * time.Second, Owner: "b"})
	if err != nil {
		t.Fatalf("second AcquirePermit: %v", err)
	}
	if p0.Index == p1.Index || p0.Index+p1.Index != 1 || p1.Fence <= p0.Fence || p0.Limit != 2 {
		t.Errorf("permits %d (fence %d) and %d (fence %d), want 0 and 1 with increasing fences", p0.Index, p0.Fence, p1.Index, p1.Fence)
	}
	_, err = c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: 2})
	wantIs(t, err, client.ErrLockHeld)
	_, err = c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: 3})
	wantIs(t, err, client.ErrLimitMismatch)
	if pe := wantProblem(t, err, http.StatusConflict, "limit-mismatch"); pe.Limit != 2 {
		t.Errorf("limit-mismatch Limit %d, want 2", pe.Limit)
	}
	if again, err := c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: 2, Token: token}); err != nil || again.Index != p0.Index || again.Fence != p0.Fence {
		t.Errorf("idempotent AcquirePermit = %+v, %v; want permit %d fence %d", again, err, p0.Index, p0.Fence)
	}
	info, err := c.InspectSemaphore(ctx, sem)
	if err != nil || info.Limit != 2 || len(info.Permits) != 2 {
		t.Errorf("InspectSemaphore = %+v, %v; want 2 permits of limit 2", info, err)
	}
	if e, err := c.ExtendPermit(ctx, sem, p1.Token, 20*time.Second); err != nil || e.Index != p1.Index || e.Fence != p1.Fence {
		t.Errorf("ExtendPermit = %+v, %v", e, err)
	}

	got := make(chan error, 1)
	go func() {
		p, err := c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: 2, Wait: 20 * time.Second})
		if err == nil {
			err = c.ReleasePermit(ctx, sem, p.Token)
		}
		got <- err
	}()
	if err := c.ReleasePermit(ctx, sem, token); err != nil {
		t.Fatalf("ReleasePermit: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting AcquirePermit: %v", err)
	}
	if err := c.ReleasePermit(ctx, sem, token); err != nil {
		t.Errorf("retried ReleasePermit: %v", err)
	}
	if err := c.ReleasePermit(ctx, sem, p1.Token); err != nil {
		t.Fatalf("ReleasePermit: %v", err)
	}
	if info, err := c.InspectSemaphore(ctx, sem); err != nil || info.Limit != 0 || len(info.Permits) != 0 {
		t.Errorf("InspectSemaphore of a free semaphore = %+v, %v", info, err)
	}
}
