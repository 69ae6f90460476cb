package server

import (
	"context"
	"time"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// ListLocks lists a page of the locks held in the caller's namespace: 200,
// never with a token.
func (s *Server) ListLocks(ctx context.Context, req api.ListLocksRequestObject) (api.ListLocksResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	o := redlock.ListOptions{Namespace: namespaceFrom(ctx), Limit: redlock.DefaultListLimit}
	p := req.Params
	if p.Limit != nil {
		o.Limit = *p.Limit
	}
	if p.Prefix != nil {
		o.Prefix = *p.Prefix
	}
	if p.Cursor != nil {
		o.Cursor = *p.Cursor
	}
	defer s.cfg.Metrics.observeOp("list", time.Now())
	page, err := s.cfg.Locker.List(ctx, o)
	if err != nil {
		return nil, err
	}
	setOutcome(ctx, "listed")
	resp := api.ListLocks200JSONResponse{Body: api.LockList{Locks: make([]api.ListedLock, 0, len(page.Locks))},
		Headers: api.ListLocks200ResponseHeaders{XRequestId: requestID(ctx)}}
	for _, l := range page.Locks {
		resp.Body.Locks = append(resp.Body.Locks, api.ListedLock{Resource: l.Resource, Owner: l.Owner, FencingToken: l.Fence,
			RemainingMs: l.Remaining.Milliseconds(), HeldNodes: l.HeldNodes, Mode: api.ListedLockMode(l.Mode), Readers: l.Readers})
	}
	if page.Next != "" {
		resp.Body.NextCursor = &page.Next
	}
	return resp, nil
}
