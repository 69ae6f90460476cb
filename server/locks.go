package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// timeLayout is the layout of the times in response bodies: RFC 3339 in UTC
// with milliseconds (openapi.yaml).
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// AcquireLock takes a lock: 201. An acquire with wait_ms waits here, in its
// handler (see waitFor).
func (s *Server) AcquireLock(ctx context.Context, req api.AcquireLockRequestObject) (api.AcquireLockResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	o := s.acquireOptions(ctx, req.Body)
	return waitFor(s, ctx, o, "acquire", func(ctx context.Context, o redlock.AcquireOptions) (api.AcquireLockResponseObject, error) {
		return s.acquire(ctx, req.Resource, o)
	})
}

// waitFor runs acquire, a lock or permit acquire with options o. With
// o.Wait > 0 it runs in a waiting slot (takeWaiter) until it gets what it
// asked for, the end of its wait, its client going away (which cancels ctx)
// or BeginShutdown (503 shutting-down). op is its metrics label when it
// makes one round.
func waitFor[T any](s *Server, ctx context.Context, o redlock.AcquireOptions, op string,
	acquire func(context.Context, redlock.AcquireOptions) (T, error)) (T, error) {
	var full error // takeWaiter's error
	if o.Wait > 0 {
		if full = s.takeWaiter(o.Namespace); full == nil {
			defer s.leaveWaiter(o.Namespace)
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			stop := context.AfterFunc(s.drain, func() { cancel(errShuttingDown) })
			defer stop()
			resp, err := acquire(ctx, o)
			if err != nil && errors.Is(context.Cause(ctx), errShuttingDown) {
				err = errors.Join(errShuttingDown, err)
			}
			return resp, err
		}
		// A lock that is free now needs no waiting slot: one round, as
		// without wait_ms, that answers full only if the lock is held. The
		// coordinator, which bounds waits, does not see this one.
		if o.Wait > s.cfg.MaxWait {
			var zero T
			return zero, fmt.Errorf("%w: wait must be within [0, %d] ms", redlock.ErrInvalid, s.cfg.MaxWait.Milliseconds())
		}
		o.Wait = 0
	}
	defer s.cfg.Metrics.observeOp(op, time.Now())
	resp, err := acquire(ctx, o)
	if full != nil && errors.Is(err, redlock.ErrLockHeld) {
		err = full
	}
	return resp, err
}

// acquireOptions returns the options of an acquire's body, which
// validateRequest has checked against openapi.yaml; the coordinator checks
// what depends on its configuration (max TTL, max wait).
func (s *Server) acquireOptions(ctx context.Context, b *api.AcquireRequest) redlock.AcquireOptions {
	o := redlock.AcquireOptions{Namespace: namespaceFrom(ctx), TTL: s.cfg.DefaultTTL}
	if b == nil {
		return o
	}
	o.TTL = s.ttl(b.TTLMs)
	if b.WaitMs != nil {
		o.Wait = millis(*b.WaitMs)
	}
	if b.Token != nil {
		o.Token = *b.Token
	}
	if b.Owner != nil {
		o.Owner = *b.Owner
	}
	if b.Mode != nil {
		o.Mode = redlock.Mode(*b.Mode)
	}
	return o
}

// acquire takes the lock and makes the 201 response.
func (s *Server) acquire(ctx context.Context, resource string, o redlock.AcquireOptions) (api.AcquireLockResponseObject, error) {
	lock, err := s.cfg.Locker.Acquire(ctx, resource, o)
	if err != nil {
		return nil, err
	}
	setLockOutcome(ctx, "acquired", lock.Fence)
	return api.AcquireLock201JSONResponse{
		Body:    lockResponse(resource, lock),
		Headers: api.AcquireLock201ResponseHeaders{Location: "/locks/" + url.PathEscape(resource), XRequestId: requestID(ctx)},
	}, nil
}

// ReleaseLock releases a lock: 204.
func (s *Server) ReleaseLock(ctx context.Context, req api.ReleaseLockRequestObject) (api.ReleaseLockResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	defer s.cfg.Metrics.observeOp("release", time.Now())
	if err := s.cfg.Locker.Release(ctx, namespaceFrom(ctx), req.Resource, req.Params.LockToken); err != nil {
		return nil, err
	}
	setOutcome(ctx, "released")
	return api.ReleaseLock204Response{Headers: api.ReleaseLock204ResponseHeaders{XRequestId: requestID(ctx)}}, nil
}

// ExtendLock extends a lock: 200 with the lock.
func (s *Server) ExtendLock(ctx context.Context, req api.ExtendLockRequestObject) (api.ExtendLockResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	defer s.cfg.Metrics.observeOp("extend", time.Now())
	lock, err := s.cfg.Locker.Extend(ctx, namespaceFrom(ctx), req.Resource, req.Params.LockToken, s.extendTTL(req.Body))
	if err != nil {
		return nil, err
	}
	setLockOutcome(ctx, "extended", lock.Fence)
	return api.ExtendLock200JSONResponse{Body: lockResponse(req.Resource, lock), Headers: api.ExtendLock200ResponseHeaders{XRequestId: requestID(ctx)}}, nil
}

// InspectLock tells whether a lock is held and by whom: 200, with held false
// when it is free (404 is only for paths that name no route).
func (s *Server) InspectLock(ctx context.Context, req api.InspectLockRequestObject) (api.InspectLockResponseObject, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	defer s.cfg.Metrics.observeOp("inspect", time.Now())
	info, err := s.cfg.Locker.Inspect(ctx, namespaceFrom(ctx), req.Resource)
	if errors.Is(err, redlock.ErrNotHeld) {
		setOutcome(ctx, "free")
		return inspected(ctx, api.LockInfo{Resource: req.Resource, Held: false}), nil
	}
	if err != nil {
		return nil, err
	}
	setLockOutcome(ctx, "held", info.Fence)
	return inspected(ctx, api.LockInfo{
		Resource:     req.Resource,
		Held:         true,
		Owner:        &info.Owner,
		FencingToken: &info.Fence,
		RemainingMs:  new(info.Remaining.Milliseconds()),
		HeldNodes:    &info.HeldNodes,
		Mode:         new(api.LockInfoMode(info.Mode)),
		Readers:      &info.Readers,
	}), nil
}

func inspected(ctx context.Context, body api.LockInfo) api.InspectLock200JSONResponse {
	return api.InspectLock200JSONResponse{Body: body, Headers: api.InspectLock200ResponseHeaders{XRequestId: requestID(ctx)}}
}

// admit returns errShuttingDown once BeginShutdown was called. With API
// keys, it also refuses a request that authenticate did not let through (a
// safety net: authenticate runs before routing and answers those itself).
// The request's parameters and body are valid as openapi.yaml says
// (validateRequest).
func (s *Server) admit(ctx context.Context) error {
	if rq := reqInfoOf(ctx); s.cfg.Keys.Len() > 0 && (rq == nil || rq.caller == nil) {
		return errNoKey
	}
	if s.drain.Err() != nil {
		return errShuttingDown
	}
	return nil
}

// ttl returns the TTL asked for in ms, or the default TTL if nil.
func (s *Server) ttl(ms *int64) time.Duration {
	if ms == nil {
		return s.cfg.DefaultTTL
	}
	return millis(*ms)
}

// extendTTL is the TTL an extend's body asks for (the default TTL when it
// gives none).
func (s *Server) extendTTL(b *api.ExtendRequest) time.Duration {
	if b == nil {
		return s.cfg.DefaultTTL
	}
	return s.ttl(b.TTLMs)
}

// millis is ms milliseconds, saturated at the bounds of time.Duration, so
// that the coordinator refuses a huge value rather than a wrapped one.
func millis(ms int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Millisecond)
	return time.Duration(min(max(ms, -most), most)) * time.Millisecond
}

// lockResponse is the body of a successful acquire or extend.
func lockResponse(resource string, l redlock.Lock) api.LockResponse {
	return api.LockResponse{
		Resource:     resource,
		Token:        l.Token,
		FencingToken: l.Fence,
		TTLMs:        l.TTL.Milliseconds(),
		ValidityMs:   l.Validity.Milliseconds(),
		ExpiresAt:    l.Until.UTC().Format(timeLayout),
		Nodes:        l.Nodes,
		Quorum:       l.Quorum,
		LockedNodes:  l.Locked,
		Mode:         new(api.LockResponseMode(l.Mode)),
	}
}
