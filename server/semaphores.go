package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// Errors of AcquirePermit that problemFor words apart from those of locks.
var (
	// errPermitsHeld wraps redlock.ErrLockHeld: every permit is held.
	errPermitsHeld = errors.New("server: every permit is held")
)

// limitMismatch is redlock.ErrLimitMismatch with the limit asked for.
type limitMismatch struct {
	asked int
	err   error // a *redlock.LimitError
}

func (e *limitMismatch) Error() string { return fmt.Sprintf("asked limit %d: %v", e.asked, e.err) }
func (e *limitMismatch) Unwrap() error { return e.err }

// AcquirePermit takes a permit of a semaphore: 201. It waits as AcquireLock.
func (s *Server) AcquirePermit(ctx context.Context, req api.AcquirePermitRequestObject) (api.AcquirePermitResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	b := req.Body
	if b == nil {
		b = &api.AcquirePermitRequest{} // no limit: refused as such
	}
	o := s.acquireOptions(ctx, &api.AcquireRequest{TTLMs: b.TTLMs, WaitMs: b.WaitMs, Token: b.Token, Owner: b.Owner})
	return waitFor(s, ctx, o, "acquire_permit", func(ctx context.Context, o redlock.AcquireOptions) (api.AcquirePermitResponseObject, error) {
		p, err := s.cfg.Locker.AcquirePermit(ctx, req.Name, redlock.PermitOptions{AcquireOptions: o, Limit: b.Limit})
		switch {
		case errors.Is(err, redlock.ErrLimitMismatch):
			return nil, &limitMismatch{asked: b.Limit, err: err}
		case errors.Is(err, redlock.ErrLockHeld):
			return nil, fmt.Errorf("%w: %w", errPermitsHeld, err)
		case err != nil:
			return nil, err
		}
		setLockOutcome(ctx, "acquired", p.Fence)
		return api.AcquirePermit201JSONResponse{
			Body:    permitResponse(req.Name, p),
			Headers: api.AcquirePermit201ResponseHeaders{Location: "/semaphores/" + url.PathEscape(req.Name), XRequestId: requestID(ctx)},
		}, nil
	})
}

// ExtendPermit extends a permit: 200 with the permit.
func (s *Server) ExtendPermit(ctx context.Context, req api.ExtendPermitRequestObject) (api.ExtendPermitResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	defer s.cfg.Metrics.observeOp("extend_permit", time.Now())
	p, err := s.cfg.Locker.ExtendPermit(ctx, namespaceFrom(ctx), req.Name, req.Params.LockToken, s.extendTTL(req.Body))
	if err != nil {
		return nil, err
	}
	setLockOutcome(ctx, "extended", p.Fence)
	return api.ExtendPermit200JSONResponse{Body: permitResponse(req.Name, p), Headers: api.ExtendPermit200ResponseHeaders{XRequestId: requestID(ctx)}}, nil
}

// ReleasePermit releases a permit: 204.
func (s *Server) ReleasePermit(ctx context.Context, req api.ReleasePermitRequestObject) (api.ReleasePermitResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	defer s.cfg.Metrics.observeOp("release_permit", time.Now())
	if err := s.cfg.Locker.ReleasePermit(ctx, namespaceFrom(ctx), req.Name, req.Params.LockToken); err != nil {
		return nil, err
	}
	setOutcome(ctx, "released")
	return api.ReleasePermit204Response{Headers: api.ReleasePermit204ResponseHeaders{XRequestId: requestID(ctx)}}, nil
}

// InspectSemaphore tells which permits are held and by whom, never their
// tokens: 200, with no permit when the semaphore is free.
func (s *Server) InspectSemaphore(ctx context.Context, req api.InspectSemaphoreRequestObject) (api.InspectSemaphoreResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	defer s.cfg.Metrics.observeOp("inspect_semaphore", time.Now())
	info, err := s.cfg.Locker.InspectSemaphore(ctx, namespaceFrom(ctx), req.Name)
	if err != nil {
		return nil, err
	}
	body := api.SemaphoreInfo{Name: req.Name, Limit: info.Limit, Held: len(info.Permits), Permits: make([]api.PermitInfo, 0, len(info.Permits))}
	for _, p := range info.Permits {
		body.Permits = append(body.Permits, api.PermitInfo{Permit: p.Index, Owner: p.Owner, FencingToken: p.Fence,
			RemainingMs: p.Remaining.Milliseconds(), HeldNodes: p.HeldNodes})
	}
	outcome := "free"
	if len(info.Permits) > 0 {
		outcome = "held"
	}
	setOutcome(ctx, outcome)
	return api.InspectSemaphore200JSONResponse{Body: body, Headers: api.InspectSemaphore200ResponseHeaders{XRequestId: requestID(ctx)}}, nil
}

// permitResponse is the body of a successful permit acquire or extend.
func permitResponse(name string, p redlock.Permit) api.PermitResponse {
	l := lockResponse(name, p.Lock)
	return api.PermitResponse{
		Resource: l.Resource, Token: l.Token, FencingToken: l.FencingToken, TTLMs: l.TTLMs, ValidityMs: l.ValidityMs,
		ExpiresAt: l.ExpiresAt, Nodes: l.Nodes, Quorum: l.Quorum, LockedNodes: l.LockedNodes,
		Limit: p.Limit, Permit: p.Index,
	}
}
