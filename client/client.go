// Package client is a Go client of the redlockd HTTP API: Acquire, Extend,
// Release, Inspect and List for locks; AcquirePermit, ExtendPermit,
// ReleasePermit and InspectSemaphore for semaphores. It stands alone: a program that uses it links neither
// package redlock nor go-redis nor zerolog, so it has sentinel errors of its
// own, named as the library's (ErrLockHeld, ErrNotOwner, ...).
//
// The HTTP layer (client.gen.go) is generated from openapi.yaml by go
// generate (change openapi.yaml, never it); this file is the typed API
// around it. Use NewClientWithResponses for /readyz and /metrics.
//
// What a holder must respect (see docs/clients.md):
//   - Lock.Until is the end of the safe window on this machine's monotonic
//     clock. It counts validity from before the request was sent, so the
//     client's own round trip (and any wait) is already subtracted. Finish, or
//     Extend, before Until.
//   - Pass Lock.Fence to the storage you protect and have it reject writes
//     with a smaller fencing token than one it has seen.
//   - A Release or Extend that fails with ErrNotOwner means the critical
//     section may not have been exclusive.
package client

// The generator is the repository's tool (its go.mod's tool line), so that
// this module's graph stays small; internal/valid is the repository's
// internal/valid (the rules of names and tokens), copied.
//
//go:generate go tool -C .. oapi-codegen -config client/cfg.yaml openapi.yaml
//go:generate sh -c "{ echo '// Code generated from ../internal/valid/valid.go by go generate. DO NOT EDIT.'; echo; cat ../internal/valid/valid.go; } > internal/valid/valid.go"

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redlockd/redlockd/client/internal/valid"
)

// Sentinel errors. The gateway's answers come as a *ProblemError that
// unwraps to one of them; callers compare with errors.Is. Every call may
// return ErrInvalid, ErrUnauthorized, ErrUnreachable or ErrUnexpected; each
// method says which others.
var (
	// ErrInvalid wraps every argument error (bad resource, TTL, token, ...),
	// found here or by the gateway (400 invalid-request, 413).
	ErrInvalid = errors.New("client: invalid argument")

	// ErrLockHeld means another owner holds the lock (409 lock-held).
	ErrLockHeld = errors.New("client: lock held by another owner")

	// ErrNotOwner means the token does not hold the lock (409 not-owner):
	// it was lost. ErrLockExpired and ErrHeldByOther say more.
	ErrNotOwner = errors.New("client: not the lock owner")

	// ErrLockExpired means nobody holds the lock any more: it expired or was
	// released before. It wraps ErrNotOwner.
	ErrLockExpired = fmt.Errorf("%w: lock expired or released", ErrNotOwner)

	// ErrHeldByOther means another token holds the lock now; it wraps ErrNotOwner.
	ErrHeldByOther = fmt.Errorf("%w: lock held by another owner", ErrNotOwner)

	// ErrQuorumUnavailable means the gateway could not reach a quorum of
	// nodes, is shutting down, or has too many acquires waiting (503): the
	// outcome is unknown, try again (after ProblemError.RetryAfter, if set).
	ErrQuorumUnavailable = errors.New("client: quorum unavailable")

	// ErrUnauthorized means the gateway refused the API key (401): it is
	// missing, unknown, or does not reach this namespace.
	ErrUnauthorized = errors.New("client: unauthorized")

	// ErrUnreachable means no answer came from the gateway: the connection
	// failed, timed out, or a proxy in front of it answered 502/503/504
	// without a problem body. The outcome of the call is unknown.
	ErrUnreachable = errors.New("client: gateway unreachable")

	// ErrUnexpected means the gateway answered something this client does
	// not expect: an internal error, an unknown problem type, a malformed
	// body, or something that is not redlockd at all (check the URL).
	ErrUnexpected = errors.New("client: unexpected response")

	// ErrLimitMismatch means the semaphore's permits are held with another
	// limit than the one asked for (409 limit-mismatch); the *ProblemError's
	// Limit is theirs. Nothing changed.
	ErrLimitMismatch = errors.New("client: the semaphore's permits are held with another limit")

	// ErrNotFound means the answer was 404: the base URL (or its path
	// prefix) is wrong, or a proxy in front of the gateway does not forward
	// the path. It never means that a lock is free (see Inspect).
	ErrNotFound = errors.New("client: no such path (check the base URL)")

	// ErrLost means a Hold ended without being released: an extension or
	// the release was answered 409 not-owner, or the validity ended without
	// a successful extension. The work it protected may not have been
	// exclusive. It comes joined with its cause.
	ErrLost = errors.New("client: hold lost")

	// ErrReleased is the Err of a Hold released before it was lost.
	ErrReleased = errors.New("client: hold released")
)

// HeldError is Acquire's ErrLockHeld: another owner holds the lock.
type HeldError struct {
	// Remaining is the gateway's hint when to try again; 0 if unknown.
	Remaining time.Duration
}

func (e *HeldError) Error() string { return ErrLockHeld.Error() }

func (e *HeldError) Unwrap() error { return ErrLockHeld }

const (
	DefaultTimeout    = 30 * time.Second        // Options.Timeout's default
	problemTypePrefix = "urn:redlockd:problem:" // + kind is a problem's type
)

// Options configure a Client. The zero value of each field means its default.
type Options struct {
	// HTTPClient sends the requests. Its Timeout, if any, must be longer
	// than the longest wait an Acquire asks for. Default: http.DefaultClient.
	HTTPClient *http.Client
	// APIKey is sent as "Authorization: Bearer <key>" with every request.
	// Default: none (for a gateway without an API keys file).
	APIKey string
	// Timeout bounds each call whose context has no deadline, on top of the
	// call's wait. Default: DefaultTimeout (30s).
	Timeout time.Duration
	// OtherURLs are the base URLs of more gateways of the same nodes. Each
	// call goes to one gateway; one that does not answer, or answers 502,
	// 503 or 504, hands the next calls (a retry) to the next gateway, in
	// turn. Default: none, only the base URL given to New.
	OtherURLs []string
}

// Client calls a redlockd gateway. It is safe for concurrent use.
type Client struct {
	raw     *ClientWithResponses
	timeout time.Duration
}

// New returns a Client of the gateway at baseURL (http:// or https://, with
// an optional path prefix), and of those at o.OtherURLs. It sends no request.
func New(baseURL string, o Options) (*Client, error) {
	u, err := parseBase(baseURL)
	if err != nil {
		return nil, err
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("client: negative timeout %v", o.Timeout)
	}
	// net/http would refuse to send such a key on every call, as if the
	// gateway were unreachable; the error does not quote it.
	if strings.ContainsFunc(o.APIKey, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }) {
		return nil, errors.New("client: the API key holds control characters that an HTTP header cannot carry")
	}
	var doer HttpRequestDoer = cmp.Or(o.HTTPClient, http.DefaultClient)
	if len(o.OtherURLs) > 0 {
		g := &gateways{doer: doer, first: u, bases: []*url.URL{u}}
		for _, other := range o.OtherURLs {
			b, err := parseBase(other)
			if err != nil {
				return nil, err
			}
			g.bases = append(g.bases, b)
		}
		doer = g
	}
	opts := []ClientOption{WithHTTPClient(doer)}
	if o.APIKey != "" {
		auth := "Bearer " + o.APIKey
		opts = append(opts, WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", auth)
			return nil
		}))
	}
	raw, err := NewClientWithResponses(u.String(), opts...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{raw: raw, timeout: cmp.Or(o.Timeout, DefaultTimeout)}, nil
}

// parseBase parses and checks a gateway's base URL.
func parseBase(baseURL string) (*url.URL, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http://host[:port] or https://host[:port]", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("client: base URL %q: no user, query or fragment allowed", u.Redacted())
	}
	return u, nil
}

// AcquireOptions are the options of one Acquire. The zero value of each
// field means the gateway's default.
type AcquireOptions struct {
	// TTL is the lock's time to live, at least 100ms and at most the
	// gateway's max TTL. Default: the gateway's default TTL (30s).
	TTL time.Duration
	// Wait is how long the gateway may wait for the lock to be free, at most
	// the gateway's max wait (60s by default). Default: 0, one attempt.
	Wait time.Duration
	// Token is a client-chosen token (22–128 characters of [A-Za-z0-9_-]). It
	// makes Acquire idempotent: if the lock is already held with it, Acquire
	// succeeds again with the same fencing token and a fresh TTL, so a call
	// whose answer was lost can be retried, and released even if it never
	// answered. Default: the gateway makes a random token.
	Token string
	// Owner is free text shown by Inspect (at most 256 characters).
	Owner string
	// Mode is ModeWrite (exclusive; "" means it too) or ModeRead (shared
	// with other readers; a writer that waits keeps new readers out).
	Mode Mode
}

// Mode is how a lock is held: by one writer, or shared by readers.
type Mode string

// The modes of a lock.
const (
	ModeWrite Mode = "write"
	ModeRead  Mode = "read"
)

// Lock is a lock acquired or extended through the gateway. It is a value:
// nothing changes it after it is returned.
type Lock struct {
	Resource string
	// Token is the lock's identity: whoever knows it may extend or release.
	// Never log it.
	Token string
	// Fence is the fencing token: a writer's is strictly greater than
	// every fence handed out before for the resource; a reader's is the
	// last writer's. Pass it to the storage you protect.
	Fence int64
	Mode  Mode // ModeWrite or ModeRead; "" in a Permit (a semaphore has no modes)
	// TTL is the TTL the lock was set with. Validity is the gateway's
	// validity_ms: how long the lock is safely held, measured by the gateway
	// from before it sent the first command.
	TTL, Validity time.Duration
	// Start is the instant (with a monotonic clock reading) before the
	// request was sent; Until is Start + Validity, the end of the safe
	// window on this machine: finish or Extend before it.
	Start, Until time.Time
	// ExpiresAt is the gateway's wall-clock estimate of the same end, for
	// display: clocks of two machines differ, so rely on Until.
	ExpiresAt time.Time
	// Nodes is the number of nodes, Quorum the number needed, Locked the
	// number that hold the lock.
	Nodes, Quorum, Locked int
}

// Info is what Inspect tells about a lock. It never includes the token.
type Info struct {
	Resource string
	// Held tells whether a token holds the lock on a quorum of nodes. The
	// other fields are zero when it is false.
	Held bool
	// Mode is ModeWrite, or ModeRead when readers hold the lock: then
	// Readers is how many, Owner, Remaining and HeldNodes are those of the
	// reader that holds it longest, and Fence the greatest of theirs.
	Mode    Mode
	Readers int
	Owner   string
	Fence   int64
	// Remaining is the smallest remaining TTL among the quorum of nodes that
	// hold the lock.
	Remaining time.Duration
	HeldNodes int
}

// Acquire takes the lock on resource, letting the gateway wait up to o.Wait
// for it. It may also return a *HeldError (ErrLockHeld; Remaining is the
// gateway's retry hint) or ErrQuorumUnavailable. When the outcome is unknown
// (ErrQuorumUnavailable, ErrUnreachable) the lock may have been taken: with
// a client-chosen token, retry or Release it.
//
// The returned Lock's Until counts the validity from before the request was
// sent, so time spent waiting is taken off it: after a wait, Extend at once
// (an extension never waits) if you need the lock's full window.
func (c *Client) Acquire(ctx context.Context, resource string, o AcquireOptions) (Lock, error) {
	body := AcquireRequest{TTLMs: millis(o.TTL), WaitMs: millis(o.Wait)}
	var tokens []string
	if o.Token != "" {
		body.Token, tokens = &o.Token, []string{o.Token}
	}
	if o.Owner != "" {
		body.Owner = &o.Owner
	}
	if o.Mode != "" {
		if o.Mode != ModeRead && o.Mode != ModeWrite {
			return Lock{}, invalid("mode %q: want read or write", o.Mode)
		}
		body.Mode = new(AcquireRequestMode(o.Mode))
	}
	if err := check(resource, tokens...); err != nil {
		return Lock{}, err
	}
	if o.TTL < 0 || o.Wait < 0 {
		return Lock{}, invalid("negative TTL %v or wait %v", o.TTL, o.Wait)
	}

	ctx, cancel := c.bound(ctx, o.Wait)
	defer cancel()
	start := time.Now()
	res, err := c.raw.AcquireLockWithResponse(ctx, resource, body)
	if err != nil {
		return Lock{}, transport(err)
	}
	if res.StatusCode() != http.StatusCreated || res.JSON201 == nil {
		return Lock{}, responseError(res.HTTPResponse, res.Body)
	}
	return lockFrom(res.JSON201, start), nil
}

// Extend makes the lock held with token valid for ttl from now (the
// gateway's default TTL when ttl is 0); the returned Lock has the same token
// and fence and a new validity. It may also return ErrLockExpired or
// ErrHeldByOther (both ErrNotOwner: the lock was lost) or
// ErrQuorumUnavailable (unknown: try again while the lock's validity lasts).
func (c *Client) Extend(ctx context.Context, resource, token string, ttl time.Duration) (Lock, error) {
	if err := check(resource, token); err != nil {
		return Lock{}, err
	}
	if ttl < 0 {
		return Lock{}, invalid("negative TTL %v", ttl)
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	start := time.Now()
	res, err := c.raw.ExtendLockWithResponse(ctx, resource, &ExtendLockParams{LockToken: token}, ExtendRequest{TTLMs: millis(ttl)})
	if err != nil {
		return Lock{}, transport(err)
	}
	if res.StatusCode() != http.StatusOK || res.JSON200 == nil {
		return Lock{}, responseError(res.HTTPResponse, res.Body)
	}
	return lockFrom(res.JSON200, start), nil
}

// Release deletes the lock held with token. It is idempotent: retried with
// the token that released the lock (its first answer lost), it succeeds again
// while the nodes remember the release (a lock's last 8 releases, for at
// least max TTL after the last). It may also return ErrLockExpired or
// ErrHeldByOther (both ErrNotOwner: the critical section may not have been
// exclusive) or ErrQuorumUnavailable (unknown: the lock expires anyway).
func (c *Client) Release(ctx context.Context, resource, token string) error {
	if err := check(resource, token); err != nil {
		return err
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	res, err := c.raw.ReleaseLockWithResponse(ctx, resource, &ReleaseLockParams{LockToken: token})
	if err != nil {
		return transport(err)
	}
	if res.StatusCode() != http.StatusNoContent {
		return responseError(res.HTTPResponse, res.Body)
	}
	return nil
}

// Inspect tells whether the lock on resource is held, and by whom: a free
// lock is an Info with Held false and no error. It may also return
// ErrQuorumUnavailable or ErrNotFound (a wrong base URL, not a free lock).
func (c *Client) Inspect(ctx context.Context, resource string) (Info, error) {
	if err := check(resource); err != nil {
		return Info{}, err
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	res, err := c.raw.InspectLockWithResponse(ctx, resource)
	if err != nil {
		return Info{}, transport(err)
	}
	if res.StatusCode() != http.StatusOK || res.JSON200 == nil {
		return Info{}, responseError(res.HTTPResponse, res.Body)
	}
	b := res.JSON200
	info := Info{Resource: b.Resource, Held: b.Held}
	if !b.Held {
		return info, nil
	}
	if b.Owner == nil || b.FencingToken == nil || b.RemainingMs == nil || b.HeldNodes == nil || b.Mode == nil || b.Readers == nil {
		return Info{}, fmt.Errorf("%w: a held lock without its owner, fencing_token, remaining_ms, held_nodes, mode or readers", ErrUnexpected)
	}
	info.Owner, info.Fence, info.HeldNodes, info.Mode, info.Readers = *b.Owner, *b.FencingToken, *b.HeldNodes, Mode(*b.Mode), *b.Readers
	info.Remaining = time.Duration(*b.RemainingMs) * time.Millisecond
	return info, nil
}

// ListOptions are the options of one List call. The zero value of each
// field means the gateway's default.
type ListOptions struct {
	// Prefix keeps only resources whose name starts with it (at most 200
	// characters of [A-Za-z0-9._:-]). Default: every resource.
	Prefix string
	// Limit bounds the locks of the page, 1..1000. Default: 100.
	Limit int
	// Cursor is the Next of the previous page; "" for the first page.
	Cursor string
}

// Page is one page of List.
type Page struct {
	Locks []Info // held on a quorum (Held true), in no particular order
	// Next is the cursor of the next page, "" when the listing is over. A
	// page may have fewer than Limit locks, even none, and still a Next:
	// loop until Next is "".
	Next string
}

// List returns a page of the locks held in the API key's namespace (never
// their tokens). A lock held on a quorum for the whole listing is listed;
// locks taken or released meanwhile, or nodes failing, may make a listing
// miss one or list one twice (see docs/operations.md). It may also return
// ErrQuorumUnavailable (retry with the same cursor).
func (c *Client) List(ctx context.Context, o ListOptions) (Page, error) {
	if o.Limit < 0 {
		return Page{}, invalid("negative limit %d", o.Limit)
	}
	var p ListLocksParams
	if o.Prefix != "" {
		p.Prefix = &o.Prefix
	}
	if o.Limit != 0 {
		p.Limit = &o.Limit
	}
	if o.Cursor != "" {
		p.Cursor = &o.Cursor
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	res, err := c.raw.ListLocksWithResponse(ctx, &p)
	if err != nil {
		return Page{}, transport(err)
	}
	if res.StatusCode() != http.StatusOK || res.JSON200 == nil {
		return Page{}, responseError(res.HTTPResponse, res.Body)
	}
	page := Page{Locks: make([]Info, 0, len(res.JSON200.Locks))}
	for _, l := range res.JSON200.Locks {
		page.Locks = append(page.Locks, Info{Resource: l.Resource, Held: true, Mode: Mode(l.Mode), Readers: l.Readers, Owner: l.Owner, Fence: l.FencingToken,
			Remaining: time.Duration(l.RemainingMs) * time.Millisecond, HeldNodes: l.HeldNodes})
	}
	if n := res.JSON200.NextCursor; n != nil {
		page.Next = *n
	}
	return page, nil
}

// All yields every lock held whose name starts with prefix, calling List
// page after page; it ends after yielding the first error.
func (c *Client) All(ctx context.Context, prefix string) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		o := ListOptions{Prefix: prefix}
		for {
			page, err := c.List(ctx, o)
			if err != nil {
				yield(Info{}, err)
				return
			}
			for _, l := range page.Locks {
				if !yield(l, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			o.Cursor = page.Next
		}
	}
}

// bound gives ctx a deadline of c.timeout + wait unless it has one.
func (c *Client) bound(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout+wait)
}

// lockFrom converts the answer to an acquire or extend sent at start.
func lockFrom(b *LockResponse, start time.Time) Lock {
	validity := time.Duration(b.ValidityMs) * time.Millisecond
	expires, _ := time.Parse(time.RFC3339Nano, b.ExpiresAt) // zero if malformed: it is for display
	var mode Mode
	if b.Mode != nil {
		mode = Mode(*b.Mode)
	}
	return Lock{
		Resource:  b.Resource,
		Mode:      mode,
		Token:     b.Token,
		Fence:     b.FencingToken,
		TTL:       time.Duration(b.TTLMs) * time.Millisecond,
		Validity:  validity,
		Start:     start,
		Until:     start.Add(validity),
		Nodes:     b.Nodes,
		Quorum:    b.Quorum,
		Locked:    b.LockedNodes,
		ExpiresAt: expires,
	}
}

// ProblemError is an error answer of the gateway: its status and, when the
// body is an RFC 9457 problem, its members. It unwraps to Err, so callers use
// errors.Is with the sentinels and errors.As with *HeldError.
type ProblemError struct {
	Status int
	// Type is the problem type (urn:redlockd:problem:<kind>); empty when the
	// body was not a problem.
	Type string
	// Title and Detail are the problem's human-readable text.
	Title, Detail string
	// LockState is "expired" or "held-by-other" with not-owner, else empty.
	LockState string
	// Limit is the limit of the permits held with limit-mismatch, else 0.
	Limit int
	// RetryAfter is the gateway's hint when to try again (retry_after_ms,
	// else the Retry-After header); 0 if none.
	RetryAfter time.Duration
	// RequestID is the response's X-Request-Id, to find it in the logs.
	RequestID string
	// Err is what the problem means: a *HeldError or a sentinel.
	Err error
}

// Kind returns the problem kind: Type without its urn:redlockd:problem:
// prefix ("lock-held", "not-owner", ...), or "" if the body was not a problem.
func (e *ProblemError) Kind() string { return strings.TrimPrefix(e.Type, problemTypePrefix) }

func (e *ProblemError) Error() string {
	msg := fmt.Sprintf("redlockd: %d %s", e.Status, cmp.Or(e.Kind(), http.StatusText(e.Status)))
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.RequestID != "" {
		msg += " (request id " + e.RequestID + ")"
	}
	return msg
}

func (e *ProblemError) Unwrap() error { return e.Err }

// responseError maps an answer other than the success of a call (res, whose
// body is body) to a *ProblemError, decoding the body when it is a problem.
// This is the one table from the gateway's problem types to the errors.
func responseError(res *http.Response, body []byte) error {
	e := &ProblemError{Status: res.StatusCode, RequestID: res.Header.Get("X-Request-Id")}
	var p Problem
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") && json.Unmarshal(body, &p) == nil {
		e.Type, e.Title, e.Detail = string(p.Type), p.Title, p.Detail
		if p.LockState != nil {
			e.LockState = string(*p.LockState)
		}
		if p.Limit != nil {
			e.Limit = *p.Limit
		}
		if p.RetryAfterMs != nil && *p.RetryAfterMs > 0 {
			e.RetryAfter = time.Duration(*p.RetryAfterMs) * time.Millisecond
		}
	}
	if e.RetryAfter == 0 {
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		}
	}
	switch e.Kind() {
	case "lock-held":
		e.Err = &HeldError{Remaining: e.RetryAfter}
	case "not-owner":
		switch e.LockState {
		case string(ProblemLockStateExpired):
			e.Err = ErrLockExpired
		case string(ProblemLockStateHeldByOther):
			e.Err = ErrHeldByOther
		default:
			e.Err = ErrNotOwner
		}
	case "limit-mismatch":
		e.Err = ErrLimitMismatch
	case "quorum-unavailable", "shutting-down", "too-many-waiters":
		e.Err = ErrQuorumUnavailable
	case "invalid-request", "payload-too-large":
		e.Err = ErrInvalid
	case "unauthorized":
		e.Err = ErrUnauthorized
	case "not-found":
		e.Err = ErrNotFound // no such path: the base URL is wrong
	case "":
		switch e.Status {
		case http.StatusNotFound:
			e.Err = ErrNotFound // a proxy or server that is not the gateway
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			e.Err = ErrUnreachable // a proxy that could not reach the gateway
		default:
			e.Err = ErrUnexpected
		}
	default: // internal, method-not-allowed, unknown kinds
		e.Err = ErrUnexpected
	}
	return e
}

// transport wraps an error of the generated client: sending the request or
// reading the answer (ErrUnreachable), or decoding it (ErrUnexpected). It
// keeps the cause, so errors.Is(err, context.DeadlineExceeded) works.
func transport(err error) error {
	var ne net.Error // *url.Error, as http.Client returns, is one too
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return fmt.Errorf("%w: %w", ErrUnexpected, err)
}

// check validates a resource name and the tokens given.
func check(resource string, tokens ...string) error {
	if !valid.Name(resource) {
		return invalid("resource must be 1-200 characters of [A-Za-z0-9._:-], other than . and ..")
	}
	return checkTokens(tokens...)
}

// checkTokens validates tokens.
func checkTokens(tokens ...string) error {
	for _, t := range tokens {
		if !valid.Token(t) {
			return invalid("token must be 22-128 characters of [A-Za-z0-9_-]")
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// millis is d in milliseconds for a request body; nil (the gateway's
// default) for 0.
func millis(d time.Duration) *int64 {
	if d == 0 {
		return nil
	}
	return new(d.Milliseconds())
}
