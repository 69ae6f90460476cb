package redlock

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Callers compare with errors.Is: the coordinator wraps and
// joins them with node errors and context errors.
var (
	// ErrLockHeld means another token holds the lock (on enough nodes that a
	// quorum could not be reached). The returned error is a *HeldError.
	ErrLockHeld = errors.New("redlock: lock held by another owner")

	// ErrNotOwner means the token does not hold the lock on a quorum. It is
	// always returned wrapped as ErrLockExpired or ErrHeldByOther.
	ErrNotOwner = errors.New("redlock: not the lock owner")

	// ErrLockExpired means nobody holds the lock any more: it expired or was
	// released before. It wraps ErrNotOwner.
	ErrLockExpired = fmt.Errorf("%w: lock expired or released", ErrNotOwner)

	// ErrHeldByOther means another token holds the lock now. It wraps ErrNotOwner.
	ErrHeldByOther = fmt.Errorf("%w: lock held by another owner", ErrNotOwner)

	// ErrQuorumUnavailable means too few nodes answered (or validity ran out)
	// to decide: the outcome is unknown, try again later.
	ErrQuorumUnavailable = errors.New("redlock: quorum unavailable")

	// ErrNotHeld is returned by Inspect when no token holds the lock on a quorum.
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrInvalid wraps every argument error (bad resource, ttl, token, ...).
	ErrInvalid = errors.New("redlock: invalid argument")
)

// HeldError is returned by Acquire when the lock is held by another owner.
// It unwraps to ErrLockHeld.
type HeldError struct {
	// Remaining is the holder's remaining TTL as seen by the nodes that refused
	// (the largest of a quorum), a hint for when to try again; 0 if unknown.
	Remaining time.Duration
}

func (e *HeldError) Error() string { return ErrLockHeld.Error() }

// Unwrap returns ErrLockHeld.
func (e *HeldError) Unwrap() error { return ErrLockHeld }

// NodeError is the error of one node, identified by its index and address.
// Several are joined with errors.Join under ErrQuorumUnavailable.
type NodeError struct {
	Node int
	Addr string
	Err  error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock: node %d (%s): %v", e.Node, e.Addr, e.Err)
}

// Unwrap returns the node's underlying error.
func (e *NodeError) Unwrap() error { return e.Err }

// errQuarantined marks a node that answered but does not vote (restart quarantine).
var errQuarantined = errors.New("in restart quarantine")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
