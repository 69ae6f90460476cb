package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"
)

const (
	// maxWaitChunk is the longest wait one acquire asks the gateway for
	// (the gateway's default --max-wait): a longer HoldOptions.Wait takes
	// several requests.
	maxWaitChunk = 60 * time.Second
	// releaseTimeout bounds a release made to clean up: after a failed
	// Hold, or of a hold already lost.
	releaseTimeout = 5 * time.Second
)

// HoldOptions are the options of one Hold. The zero value of each field
// means its default.
type HoldOptions struct {
	// TTL is the TTL of the target, set again by every extension; the hold
	// extends it every TTL/3. Default: the gateway's default TTL (30s).
	TTL time.Duration
	// Wait is how long Hold may take to acquire: the gateway waits for the
	// target to be free (in requests of at most a minute), and a 503 or a
	// request without an answer (a gateway restarting, a proxy's 502/504)
	// is tried again, on the next of Options.OtherURLs if any. Default: 0,
	// one attempt.
	Wait time.Duration
	// Owner is free text shown by Inspect (at most 256 characters).
	Owner string
	// Token is the hold's client-chosen token (see AcquireOptions.Token).
	// Default: 16 random bytes, base64url-encoded. Never log it.
	Token string
	// OnRetry, if set, is called with the error before the acquire is
	// tried again (in Hold's goroutine), e.g. to say once that a gateway
	// does not answer.
	OnRetry func(err error)
}

// Hold is a target held by a Client: acquired by Client.Hold, extended
// every TTL/3 in a goroutine of its own until Release. Done is closed when
// it ends: lost (Err is then an ErrLost) or released. Its methods are safe
// for concurrent use.
type Hold struct {
	c      *Client
	target Target
	token  string
	ttl    time.Duration // each extension's TTL, as asked (0: the gateway's default)
	retry  time.Duration // the pause between attempts of an extension

	ctx    context.Context // cancelled, with Err as its cause, when the hold ends
	end    context.CancelCauseFunc
	stop   context.CancelFunc // stops keep
	kept   chan struct{}      // closed when keep has returned
	once   sync.Once
	result error // Release's

	mu    sync.Mutex
	lease lease
}

// Hold acquires target (a WriteLock, ReadLock, Locks or SemaphorePermit)
// within o.Wait and keeps it: it extends it every TTL/3, trying a failed
// extension again (503, no answer) while the validity lasts, and ends the
// hold, closing Done with an ErrLost as Err, on a 409 not-owner or at the
// end of the validity without a successful extension. After an acquire that
// left less than 2/3 of the TTL (it waited, or was slow), it extends at once.
// ctx bounds the acquire only; its values go to Context. Call Release when
// done, also on error paths (defer h.Release).
//
// It may return the errors of the target's acquire once o.Wait is over
// (ErrLockHeld, ErrQuorumUnavailable, ErrUnreachable, ErrLimitMismatch, ...),
// or ErrNotOwner when the extension right after a slow acquire found the
// target lost. When the outcome is unknown, or ctx ended, it releases the
// target before returning, so that nothing stays held.
func (c *Client) Hold(ctx context.Context, target Target, o HoldOptions) (*Hold, error) {
	if target == nil {
		return nil, invalid("no target")
	}
	if o.TTL < 0 || o.Wait < 0 {
		return nil, invalid("negative TTL %v or wait %v", o.TTL, o.Wait)
	}
	h := &Hold{c: c, target: target, token: o.Token, ttl: o.TTL, kept: make(chan struct{})}
	if h.token == "" {
		h.token = newToken()
	} else if err := checkTokens(h.token); err != nil {
		return nil, err
	}
	l, err := h.acquire(ctx, o)
	if err != nil {
		if unknownOutcome(err) || ctx.Err() != nil {
			_ = h.cleanup(ctx)
		}
		return nil, err
	}
	h.lease = l
	h.retry = min(max(l.TTL/10, 50*time.Millisecond), time.Second)
	base := context.WithoutCancel(ctx)
	h.ctx, h.end = context.WithCancelCause(base)
	keepCtx, stop := context.WithCancel(base)
	h.stop = stop
	go h.keep(keepCtx)
	return h, nil
}

// Context returns a context cancelled when the hold ends, with Err as its
// cause (context.Cause): pass it to the work the hold protects.
func (h *Hold) Context() context.Context { return h.ctx }

// Done returns a channel closed when the hold ends: lost, or released.
func (h *Hold) Done() <-chan struct{} { return h.ctx.Done() }

// Err returns nil while the hold lasts. Once Done is closed it returns why:
// an error that is ErrLost and the cause (errors.Is(err, ErrNotOwner) for a
// 409, else the last answer before the validity ended), or ErrReleased.
func (h *Hold) Err() error {
	if h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(h.ctx)
}

// Token returns the hold's token. Never log it.
func (h *Hold) Token() string { return h.token }

// Fence returns the fencing token (with Locks, the first resource's): pass
// it to the storage you protect.
func (h *Hold) Fence() int64 { return h.current().Fences[0] }

// Fences returns the fencing tokens: with Locks, one per resource in their
// order; else one.
func (h *Hold) Fences() []int64 { return append([]int64(nil), h.current().Fences...) }

// Permit returns the index of the permit held (0..Limit-1) with a
// SemaphorePermit; 0 otherwise.
func (h *Hold) Permit() int { return h.current().Permit }

// Until returns the end of the current safe window on this machine's
// monotonic clock: the last successful acquire or extension's.
func (h *Hold) Until() time.Time { return h.current().Until }

// Release stops extending, releases the target and ends the hold; calls
// after the first return the first's result. It returns nil when the target
// was released while held; an ErrLost (the work may not have been
// exclusive: report it) when the hold was lost before, the validity ended,
// or the release was answered 409 not-owner; or the last error when the
// release could not be confirmed (503, no answer) while ctx and the
// validity lasted: the target then expires within its TTL.
func (h *Hold) Release(ctx context.Context) error {
	h.once.Do(func() { h.result = h.release(ctx) })
	return h.result
}

func (h *Hold) release(ctx context.Context) error {
	h.stop()
	<-h.kept
	if err := h.Err(); err != nil { // lost
		_ = h.cleanup(ctx)
		return err
	}
	until := h.Until()
	var err error
	if time.Now().After(until) {
		_ = h.cleanup(ctx)
		err = fmt.Errorf("%w: no extension succeeded before the validity ended", ErrLost)
	} else if err = h.releaseWithin(ctx, until); errors.Is(err, ErrNotOwner) {
		err = fmt.Errorf("%w: %w", ErrLost, err)
	}
	if errors.Is(err, ErrLost) {
		h.end(err)
	} else {
		h.end(ErrReleased)
	}
	return err
}

// releaseWithin releases the target, trying again after a 503 or no answer
// while ctx lasts and until the validity ends (then it expires anyway).
func (h *Hold) releaseWithin(ctx context.Context, until time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	for {
		err := h.target.release(ctx, h.c, h.token)
		if err == nil || !transient(err) || !sleep(ctx, retryHint(err)) {
			return err
		}
	}
}

// cleanup releases the target once, with a fresh context of its own limit:
// after a failed acquire whose outcome is unknown, or a hold already lost.
func (h *Hold) cleanup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return h.target.release(ctx, h.c, h.token)
}

// acquire takes the target within o.Wait. A target held by another owner, a
// 503 or no answer (see retryable) is tried again while the wait lasts, with
// the same token, so that an attempt whose answer was lost is taken over;
// the gateway does the waiting, in requests that wait at most a chunk.
func (h *Hold) acquire(ctx context.Context, o HoldOptions) (lease, error) {
	deadline := time.Now().Add(o.Wait)
	chunk := maxWaitChunk
	for {
		wait := min(max(time.Until(deadline), 0), chunk).Truncate(time.Millisecond)
		if o.Wait == 0 {
			wait = 0
		}
		l, err := h.target.acquire(ctx, h.c, h.token, o, wait)
		if wait > 0 && errors.Is(err, ErrInvalid) {
			// The gateway's --max-wait may be shorter than wait: try once
			// without waiting (refused too, the problem is elsewhere), then
			// wait in requests half as long.
			chunk = wait / 2
			l, err = h.target.acquire(ctx, h.c, h.token, o, 0)
		}
		if err == nil {
			// Until counts the validity from before the request was sent, so
			// a wait eats into it: extend at once if less than 2/3 of the TTL
			// is left, so that the work starts with a fresh, known window.
			if time.Until(l.Until) < l.TTL*2/3 {
				h.retry = min(max(l.TTL/10, 50*time.Millisecond), time.Second)
				return h.extendUntil(ctx, time.Now().Add(max(time.Until(l.Until), l.TTL/3)))
			}
			return l, nil
		}
		left := time.Until(deadline)
		if ctx.Err() != nil || left <= 0 || !retryable(err) {
			return l, err
		}
		if o.OnRetry != nil {
			o.OnRetry(err)
		}
		if !sleep(ctx, min(retryHint(err), left)) {
			return l, err
		}
	}
}

// keep extends the target every TTL/3 until ctx ends, and ends the hold
// with an ErrLost when an extension fails for good.
func (h *Hold) keep(ctx context.Context) {
	defer close(h.kept)
	l := h.current()
	for sleep(ctx, time.Until(l.Start.Add(l.TTL/3))) {
		next, err := h.extendUntil(ctx, l.Until)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			h.end(fmt.Errorf("%w: %w", ErrLost, err))
			return
		}
		h.mu.Lock()
		h.lease = next
		h.mu.Unlock()
		l = next
	}
}

// extendUntil extends the target, trying again after anything but a
// definite not-owner answer, until deadline. It returns the new lease, the
// not-owner error, or once deadline passed the last failure: the gateway's
// last answer if it gave one, since a request cut short by deadline says
// nothing about the gateway; unreachable only if no request was answered.
func (h *Hold) extendUntil(ctx context.Context, deadline time.Time) (lease, error) {
	var last error
	for {
		reqCtx, cancel := context.WithDeadline(ctx, deadline)
		l, err := h.target.extend(reqCtx, h.c, h.token, h.ttl)
		cancel()
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, ErrNotOwner), ctx.Err() != nil:
			return l, err
		}
		if last == nil || !errors.Is(err, context.DeadlineExceeded) {
			last = err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return l, fmt.Errorf("no extension succeeded before the validity ended: %w", last)
		}
		if !sleep(ctx, min(h.retry, left)) {
			return l, last
		}
	}
}

func (h *Hold) current() lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// retryable reports whether an acquire refused with err may succeed later:
// the target is held, a 503 (the quorum unavailable, a gateway shutting
// down, or every waiting slot of the gateway taken), or no answer from the
// gateway (down, restarting, or a proxy's 502, 503 or 504).
func retryable(err error) bool { return errors.Is(err, ErrLockHeld) || transient(err) }

// transient reports whether err says nothing about the target: a 503 or no
// answer.
func transient(err error) bool {
	return errors.Is(err, ErrQuorumUnavailable) || errors.Is(err, ErrUnreachable)
}

// unknownOutcome reports whether a failed acquire may have taken the
// target all the same: no answer, a 503, or an answer not understood.
func unknownOutcome(err error) bool {
	return errors.Is(err, ErrQuorumUnavailable) || errors.Is(err, ErrUnreachable) || errors.Is(err, ErrUnexpected)
}

// retryHint is how long to pause before trying again after err: the
// gateway's hint, within [50ms, 1s].
func retryHint(err error) time.Duration {
	d := time.Second
	if pe, ok := errors.AsType[*ProblemError](err); ok && pe.RetryAfter > 0 {
		d = pe.RetryAfter
	}
	return min(max(d, 50*time.Millisecond), time.Second)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// newToken returns a client-chosen token: 16 random bytes, base64url.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}
