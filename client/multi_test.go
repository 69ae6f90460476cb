package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redlockd/redlockd/client"
)

// TestMulti takes the locks of two resources at once, finds one of them
// held, extends and releases them (twice), and refuses a read mode, which a
// multi-resource lock does not have, before any request.
func TestMulti(t *testing.T) {
	g := startGateway(t, 3, nil)
	c := newClient(t, g.URL, client.Options{})
	ctx := context.Background()
	res := []string{resourceName(t), resourceName(t)}

	_, err := c.AcquireMulti(ctx, res, client.AcquireOptions{TTL: 30 * time.Second, Mode: client.ModeRead})
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrInvalid) || errors.As(err, &pe) {
		t.Fatalf("AcquireMulti with ModeRead: %v, want client.ErrInvalid without a request", err)
	}

	m, err := c.AcquireMulti(ctx, res, client.AcquireOptions{TTL: 30 * time.Second, Mode: client.ModeWrite})
	if err != nil {
		t.Fatalf("AcquireMulti: %v", err)
	}
	if !slices.Equal(m.Resources, res) || len(m.Fences) != 2 || m.Fences[0] < 1 || m.Fences[1] < 1 || m.Quorum != 2 {
		t.Fatalf("AcquireMulti = %+v, want resources %v with a fence each", m, res)
	}
	var held *client.HeldError
	if _, err := c.Acquire(ctx, res[1], client.AcquireOptions{TTL: time.Second}); !errors.As(err, &held) {
		t.Errorf("Acquire of one of them: %v, want a *client.HeldError", err)
	}
	rev := []string{res[1], res[0]}
	e, err := c.ExtendMulti(ctx, rev, m.Token, 45*time.Second)
	if err != nil || !slices.Equal(e.Resources, rev) || !slices.Equal(e.Fences, []int64{m.Fences[1], m.Fences[0]}) || e.TTL != 45*time.Second {
		t.Errorf("ExtendMulti(%v) = %+v, %v; want them in that order with their fences %v, ttl 45s", rev, e, err, m.Fences)
	}
	for range 2 { // idempotent
		if err := c.ReleaseMulti(ctx, res, m.Token); err != nil {
			t.Fatalf("ReleaseMulti: %v", err)
		}
	}
	_, err = c.ExtendMulti(ctx, res, m.Token, 0)
	wantIs(t, err, client.ErrLockExpired, client.ErrNotOwner)
}
