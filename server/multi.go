package server

import (
	"context"
	"net/url"
	"time"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// AcquireLocks takes the locks of several resources, all or none: 201.
func (s *Server) AcquireLocks(ctx context.Context, req api.AcquireLocksRequestObject) (api.AcquireLocksResponseObject, error) {
	b := req.Body
	if b == nil {
		b = &api.MultiAcquireRequest{} // no resources: refused as such
	}
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	o := s.acquireOptions(ctx, &api.AcquireRequest{TTLMs: b.TTLMs, WaitMs: b.WaitMs, Token: b.Token, Owner: b.Owner})
	return waitFor(s, ctx, o, "acquire", func(ctx context.Context, o redlock.AcquireOptions) (api.AcquireLocksResponseObject, error) {
		lock, err := s.cfg.Locker.AcquireMulti(ctx, b.Resources, o)
		if err != nil {
			return nil, err
		}
		setOutcome(ctx, "acquired")
		return api.AcquireLocks201JSONResponse{
			Body:    multiResponse(lock),
			Headers: api.AcquireLocks201ResponseHeaders{Location: multiLocation(b.Resources), XRequestId: requestID(ctx)},
		}, nil
	})
}

// ReleaseLocks releases the locks of several resources: 204.
func (s *Server) ReleaseLocks(ctx context.Context, req api.ReleaseLocksRequestObject) (api.ReleaseLocksResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	defer s.cfg.Metrics.observeOp("release", time.Now())
	if err := s.cfg.Locker.ReleaseMulti(ctx, namespaceFrom(ctx), req.Params.Resource, req.Params.LockToken); err != nil {
		return nil, err
	}
	setOutcome(ctx, "released")
	return api.ReleaseLocks204Response{Headers: api.ReleaseLocks204ResponseHeaders{XRequestId: requestID(ctx)}}, nil
}

// ExtendLocks extends the locks of several resources: 200.
func (s *Server) ExtendLocks(ctx context.Context, req api.ExtendLocksRequestObject) (api.ExtendLocksResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	defer s.cfg.Metrics.observeOp("extend", time.Now())
	lock, err := s.cfg.Locker.ExtendMulti(ctx, namespaceFrom(ctx), req.Params.Resource, req.Params.LockToken, s.extendTTL(req.Body))
	if err != nil {
		return nil, err
	}
	setOutcome(ctx, "extended")
	return api.ExtendLocks200JSONResponse{Body: multiResponse(lock), Headers: api.ExtendLocks200ResponseHeaders{XRequestId: requestID(ctx)}}, nil
}

// multiLocation is the URL of a multi-resource lock: /locks?resource=a&….
func multiLocation(resources []string) string {
	return "/locks?" + url.Values{"resource": resources}.Encode()
}

// multiResponse is the body of a successful multi-resource acquire or extend.
func multiResponse(l redlock.MultiLock) api.MultiLockResponse {
	rs := make([]api.FencedResource, len(l.Resources))
	for i, r := range l.Resources {
		rs[i] = api.FencedResource{Resource: r, FencingToken: l.Fences[i]}
	}
	return api.MultiLockResponse{
		Resources:   rs,
		Token:       l.Token,
		TTLMs:       l.TTL.Milliseconds(),
		ValidityMs:  l.Validity.Milliseconds(),
		ExpiresAt:   l.Until.UTC().Format(timeLayout),
		Nodes:       l.Nodes,
		Quorum:      l.Quorum,
		LockedNodes: l.Locked,
	}
}
