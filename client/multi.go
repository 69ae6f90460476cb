package client

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/redlockd/redlockd/client/internal/valid"
)

// MaxResources is the most resources of one AcquireMulti.
const MaxResources = valid.MaxResources

// MultiLock is the write locks of several resources, taken all together by
// AcquireMulti (all or none) under one token: what a Lock is for one
// resource, with a fencing token per resource.
type MultiLock struct {
	// Resources are the resources, in the order given to the call (AcquireMulti or ExtendMulti);
	// Fences their fencing tokens, each strictly greater than every fence
	// handed out before for its resource.
	Resources []string
	Fences    []int64
	// Token, TTL, Validity, Start, Until, ExpiresAt, Nodes, Quorum and
	// Locked are as in Lock, for every resource at once.
	Token                   string
	TTL, Validity           time.Duration
	Start, Until, ExpiresAt time.Time
	Nodes, Quorum, Locked   int
}

// AcquireMulti takes the write locks of every resource in resources, or
// none: a gateway node grants all of them or none, so taking {a, b} and
// {b, a} at once never deadlocks. o is as for Acquire, but its Mode can only
// be ModeWrite (or ""): a ModeRead is ErrInvalid. The errors are Acquire's.
// The MultiLock's Until counts from before the request was sent.
func (c *Client) AcquireMulti(ctx context.Context, resources []string, o AcquireOptions) (MultiLock, error) {
	body := MultiAcquireRequest{Resources: resources, TTLMs: millis(o.TTL), WaitMs: millis(o.Wait)}
	var tokens []string
	if o.Token != "" {
		body.Token, tokens = &o.Token, []string{o.Token}
	}
	if o.Owner != "" {
		body.Owner = &o.Owner
	}
	if err := checkResources(resources, tokens...); err != nil {
		return MultiLock{}, err
	}
	if o.Mode != "" && o.Mode != ModeWrite {
		return MultiLock{}, invalid("mode %q: the locks of several resources are write locks", o.Mode)
	}
	if o.TTL < 0 || o.Wait < 0 {
		return MultiLock{}, invalid("negative TTL %v or wait %v", o.TTL, o.Wait)
	}
	ctx, cancel := c.bound(ctx, o.Wait)
	defer cancel()
	start := time.Now()
	res, err := c.raw.AcquireLocksWithResponse(ctx, body)
	if err != nil {
		return MultiLock{}, transport(err)
	}
	if res.StatusCode() != http.StatusCreated || res.JSON201 == nil {
		return MultiLock{}, responseError(res.HTTPResponse, res.Body)
	}
	return multiFrom(res.JSON201, start)
}

// ExtendMulti makes the locks that token holds on resources valid for ttl
// from now (the gateway's default TTL when 0), keeping their fences. It
// succeeds only if token holds every one of them; errors as Extend's.
func (c *Client) ExtendMulti(ctx context.Context, resources []string, token string, ttl time.Duration) (MultiLock, error) {
	if err := checkResources(resources, token); err != nil {
		return MultiLock{}, err
	}
	if ttl < 0 {
		return MultiLock{}, invalid("negative TTL %v", ttl)
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	start := time.Now()
	res, err := c.raw.ExtendLocksWithResponse(ctx, &ExtendLocksParams{Resource: resources, LockToken: token}, ExtendRequest{TTLMs: millis(ttl)})
	if err != nil {
		return MultiLock{}, transport(err)
	}
	if res.StatusCode() != http.StatusOK || res.JSON200 == nil {
		return MultiLock{}, responseError(res.HTTPResponse, res.Body)
	}
	return multiFrom(res.JSON200, start)
}

// ReleaseMulti releases the locks that token holds on resources; idempotent
// as Release, with its errors.
func (c *Client) ReleaseMulti(ctx context.Context, resources []string, token string) error {
	if err := checkResources(resources, token); err != nil {
		return err
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	res, err := c.raw.ReleaseLocksWithResponse(ctx, &ReleaseLocksParams{Resource: resources, LockToken: token})
	if err != nil {
		return transport(err)
	}
	if res.StatusCode() != http.StatusNoContent {
		return responseError(res.HTTPResponse, res.Body)
	}
	return nil
}

// multiFrom converts the answer to a multi-resource acquire or extend sent
// at start.
func multiFrom(b *MultiLockResponse, start time.Time) (MultiLock, error) {
	l := lockFrom(&LockResponse{Token: b.Token, TTLMs: b.TTLMs, ValidityMs: b.ValidityMs, ExpiresAt: b.ExpiresAt,
		Nodes: b.Nodes, Quorum: b.Quorum, LockedNodes: b.LockedNodes}, start)
	m := MultiLock{Token: l.Token, TTL: l.TTL, Validity: l.Validity, Start: l.Start, Until: l.Until, ExpiresAt: l.ExpiresAt,
		Nodes: l.Nodes, Quorum: l.Quorum, Locked: l.Locked}
	for _, r := range b.Resources {
		m.Resources = append(m.Resources, r.Resource)
		m.Fences = append(m.Fences, r.FencingToken)
	}
	if len(m.Resources) == 0 {
		return MultiLock{}, fmt.Errorf("%w: no resources in the answer", ErrUnexpected)
	}
	return m, nil
}

// checkResources validates the resources of a multi-resource lock and the
// tokens given.
func checkResources(resources []string, tokens ...string) error {
	if problem := valid.Resources(resources); problem != "" {
		return invalid("%s", problem)
	}
	return checkTokens(tokens...)
}
