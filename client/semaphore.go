package client

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/redlockd/redlockd/client/internal/valid"
)

// MaxLimit is the largest limit of a semaphore.
const MaxLimit = valid.MaxLimit

// PermitOptions are the options of one AcquirePermit: those of Acquire, and
// the limit.
type PermitOptions struct {
	// Limit is the number of permits, 1..MaxLimit; every holder of the
	// semaphore must ask for the same. Required.
	Limit int
	// TTL, Wait, Token and Owner are as in AcquireOptions.
	TTL, Wait    time.Duration
	Token, Owner string
}

// Permit is a permit of a semaphore: a Lock (whose Resource is the
// semaphore's name and whose Fence is strictly greater than every fence
// handed out before for any permit of the semaphore), its limit, and which
// permit it is (0..Limit-1).
type Permit struct {
	Lock
	Limit, Index int
}

// SemaphoreState is what InspectSemaphore tells; never a token. (The
// generated SemaphoreInfo is its body.)
type SemaphoreState struct {
	Name    string
	Limit   int          // the limit of the permits held; 0 when none is
	Permits []HeldPermit // the permits held, by Index
}

// HeldPermit is one permit held.
type HeldPermit struct {
	Index     int
	Owner     string
	Fence     int64
	Remaining time.Duration
	HeldNodes int
}

// AcquirePermit takes one of the o.Limit permits of the semaphore name,
// letting the gateway wait up to o.Wait for one. It may also return a
// *HeldError (ErrLockHeld: every permit is held), ErrLimitMismatch (the
// permits held have another limit: the *ProblemError's Limit) or
// ErrQuorumUnavailable, with the same meaning as for Acquire.
func (c *Client) AcquirePermit(ctx context.Context, name string, o PermitOptions) (Permit, error) {
	body := AcquirePermitRequest{Limit: o.Limit, TTLMs: millis(o.TTL), WaitMs: millis(o.Wait)}
	var tokens []string
	if o.Token != "" {
		body.Token, tokens = &o.Token, []string{o.Token}
	}
	if o.Owner != "" {
		body.Owner = &o.Owner
	}
	if err := checkName(name, tokens...); err != nil {
		return Permit{}, err
	}
	if o.Limit < 1 || o.Limit > MaxLimit {
		return Permit{}, invalid("limit %d not within [1, %d]", o.Limit, MaxLimit)
	}
	if o.TTL < 0 || o.Wait < 0 {
		return Permit{}, invalid("negative TTL %v or wait %v", o.TTL, o.Wait)
	}
	ctx, cancel := c.bound(ctx, o.Wait)
	defer cancel()
	start := time.Now()
	res, err := c.raw.AcquirePermitWithResponse(ctx, name, body)
	if err != nil {
		return Permit{}, transport(err)
	}
	if res.StatusCode() != http.StatusCreated || res.JSON201 == nil {
		return Permit{}, responseError(res.HTTPResponse, res.Body)
	}
	return permitFrom(res.JSON201, start), nil
}

// ExtendPermit makes the permit held with token valid for ttl from now (the
// gateway's default TTL when 0), as Extend does for a lock; it may return
// the same errors.
func (c *Client) ExtendPermit(ctx context.Context, name, token string, ttl time.Duration) (Permit, error) {
	if err := checkName(name, token); err != nil {
		return Permit{}, err
	}
	if ttl < 0 {
		return Permit{}, invalid("negative TTL %v", ttl)
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	start := time.Now()
	res, err := c.raw.ExtendPermitWithResponse(ctx, name, &ExtendPermitParams{LockToken: token}, ExtendRequest{TTLMs: millis(ttl)})
	if err != nil {
		return Permit{}, transport(err)
	}
	if res.StatusCode() != http.StatusOK || res.JSON200 == nil {
		return Permit{}, responseError(res.HTTPResponse, res.Body)
	}
	return permitFrom(res.JSON200, start), nil
}

// ReleasePermit releases the permit held with token, as Release does for a
// lock (idempotent); it may return the same errors.
func (c *Client) ReleasePermit(ctx context.Context, name, token string) error {
	if err := checkName(name, token); err != nil {
		return err
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	res, err := c.raw.ReleasePermitWithResponse(ctx, name, &ReleasePermitParams{LockToken: token})
	if err != nil {
		return transport(err)
	}
	if res.StatusCode() != http.StatusNoContent {
		return responseError(res.HTTPResponse, res.Body)
	}
	return nil
}

// InspectSemaphore tells which permits of the semaphore name are held, and
// by whom: a free semaphore is a SemaphoreState with Limit 0 and no permit.
// It may also return ErrQuorumUnavailable or ErrNotFound.
func (c *Client) InspectSemaphore(ctx context.Context, name string) (SemaphoreState, error) {
	if err := checkName(name); err != nil {
		return SemaphoreState{}, err
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	res, err := c.raw.InspectSemaphoreWithResponse(ctx, name)
	if err != nil {
		return SemaphoreState{}, transport(err)
	}
	if res.StatusCode() != http.StatusOK || res.JSON200 == nil {
		return SemaphoreState{}, responseError(res.HTTPResponse, res.Body)
	}
	b := res.JSON200
	if b.Held != len(b.Permits) {
		return SemaphoreState{}, fmt.Errorf("%w: held %d, but %d permits listed", ErrUnexpected, b.Held, len(b.Permits))
	}
	info := SemaphoreState{Name: b.Name, Limit: b.Limit, Permits: make([]HeldPermit, 0, len(b.Permits))}
	for _, p := range b.Permits {
		info.Permits = append(info.Permits, HeldPermit{Index: p.Permit, Owner: p.Owner, Fence: p.FencingToken,
			Remaining: time.Duration(p.RemainingMs) * time.Millisecond, HeldNodes: p.HeldNodes})
	}
	return info, nil
}

// permitFrom converts the answer to a permit acquire or extend sent at start.
func permitFrom(b *PermitResponse, start time.Time) Permit {
	l := lockFrom(&LockResponse{Resource: b.Resource, Token: b.Token, FencingToken: b.FencingToken, TTLMs: b.TTLMs,
		ValidityMs: b.ValidityMs, ExpiresAt: b.ExpiresAt, Nodes: b.Nodes, Quorum: b.Quorum, LockedNodes: b.LockedNodes}, start)
	return Permit{Lock: l, Limit: b.Limit, Index: b.Permit}
}

// checkName validates a semaphore name and the tokens given.
func checkName(name string, tokens ...string) error {
	if !valid.Name(name) {
		return invalid("name must be 1-200 characters of [A-Za-z0-9._:-], other than . and ..")
	}
	return checkTokens(tokens...)
}
