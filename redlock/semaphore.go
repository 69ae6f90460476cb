package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlockd/redlockd/internal/valid"
)

// Semaphores (SPEC §7): at most Limit holders at once. Each permit i of a
// semaphore S is a lock of its own (S#i), so two holders of one permit
// conflict pairwise and Redlock's quorum argument holds per permit; the
// permits share one fence counter (fencing tokens increase across every
// permit of S) and one queue of waiters (a release of any permit wakes it).

// MaxLimit is the largest limit of a semaphore.
const MaxLimit = valid.MaxLimit

// ErrLimitMismatch means the semaphore's permits are held with another
// limit. The returned error is a *LimitError.
var ErrLimitMismatch = errors.New("redlock: the semaphore's permits are held with another limit")

// LimitError is returned by AcquirePermit when the permits held have another
// limit than the one asked for.
type LimitError struct {
	Limit int // the limit of the permits held
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v (%d)", ErrLimitMismatch, e.Limit)
}

// Unwrap returns ErrLimitMismatch.
func (e *LimitError) Unwrap() error { return ErrLimitMismatch }

// PermitOptions are AcquirePermit's options: those of a lock, and the limit.
type PermitOptions struct {
	AcquireOptions
	// Limit is the number of permits, 1..MaxLimit. Required.
	Limit int
}

// Permit is a permit of a semaphore acquired or extended on a quorum of
// nodes: a Lock whose Resource is the semaphore's name, with the limit and
// the permit's index. Fence is strictly greater than every fence handed out
// before for any permit of the semaphore.
type Permit struct {
	Lock
	Limit int
	Index int // 0..Limit-1
}

// SemaphoreInfo is what InspectSemaphore tells: the permits held on a
// quorum, never their tokens.
type SemaphoreInfo struct {
	Namespace, Name string
	Limit           int          // the limit of the permits held; 0 when none is
	Permits         []PermitInfo // by index
}

// PermitInfo is one held permit.
type PermitInfo struct {
	Index     int
	Owner     string
	Fence     int64
	Remaining time.Duration
	HeldNodes int
}

var errNotYet = errors.New("redlock: semaphores are not implemented yet")

// AcquirePermit takes a permit of the semaphore name, trying again while
// o.Wait lasts (waiting acquires are served first come, first served). May
// return ErrInvalid, a *HeldError (ErrLockHeld: every permit is held), a
// *LimitError (ErrLimitMismatch) or ErrQuorumUnavailable.
func (c *Coordinator) AcquirePermit(ctx context.Context, name string, o PermitOptions) (Permit, error) {
	return Permit{}, errNotYet
}

// ExtendPermit makes the permit held with token valid for ttl from now
// (DefaultTTL when 0). May return ErrInvalid, ErrLockExpired (the permit is
// lost) or ErrQuorumUnavailable.
func (c *Coordinator) ExtendPermit(ctx context.Context, namespace, name, token string, ttl time.Duration) (Permit, error) {
	return Permit{}, errNotYet
}

// ReleasePermit releases the permit held with token; idempotent as Release.
// May return ErrInvalid, ErrLockExpired or ErrQuorumUnavailable.
func (c *Coordinator) ReleasePermit(ctx context.Context, namespace, name, token string) error {
	return errNotYet
}

// InspectSemaphore tells which permits of the semaphore a quorum holds. A
// semaphore with no permit held is a SemaphoreInfo with Limit 0, no error.
// May return ErrInvalid or ErrQuorumUnavailable.
func (c *Coordinator) InspectSemaphore(ctx context.Context, namespace, name string) (SemaphoreInfo, error) {
	return SemaphoreInfo{}, errNotYet
}
