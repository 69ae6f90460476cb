package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/redlockd/redlockd/client"
)

// TestPermitInvalid: the client refuses what cannot make a valid request,
// before sending any.
func TestPermitInvalid(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1", client.Options{})
	ctx := context.Background()
	token := clientToken()

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

	p0, err := c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: 2, TTL: 30 * time.Second, Token: token, Owner: "a"})
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	p1, err := c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: 2, TTL: 30 * time.Second, Owner: "b"})
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
	if err != nil || info.Name != sem || info.Limit != 2 || len(info.Permits) != 2 {
		t.Fatalf("InspectSemaphore = %+v, %v; want 2 permits of limit 2", info, err)
	}
	for _, p := range []client.Permit{p0, p1} {
		got := info.Permits[p.Index]
		// p0 was taken again, without an owner, for the default 30s.
		if got.Index != p.Index || got.Fence != p.Fence || got.Owner != map[int]string{p0.Index: "", p1.Index: "b"}[p.Index] ||
			got.Remaining <= 0 || got.Remaining > 30*time.Second || got.HeldNodes < 3 {
			t.Errorf("InspectSemaphore permit %d = %+v; want fence %d, its owner, remaining in (0, 30s], 3+ nodes", p.Index, got, p.Fence)
		}
	}
	if e, err := c.ExtendPermit(ctx, sem, p1.Token, 45*time.Second); err != nil || e.Index != p1.Index || e.Fence != p1.Fence {
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
