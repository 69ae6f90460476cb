package server

import (
	"context"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// Locker is what the server needs from the lock coordinator: the methods of
// *redlock.Coordinator, which say what each does. Tests use a fake.
type Locker interface {
	Acquire(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error)
	Release(ctx context.Context, namespace, resource, token string) error
	Extend(ctx context.Context, namespace, resource, token string, ttl time.Duration) (redlock.Lock, error)
	Inspect(ctx context.Context, namespace, resource string) (redlock.Info, error)
	AcquireMulti(ctx context.Context, resources []string, o redlock.AcquireOptions) (redlock.MultiLock, error)
	ReleaseMulti(ctx context.Context, namespace string, resources []string, token string) error
	ExtendMulti(ctx context.Context, namespace string, resources []string, token string, ttl time.Duration) (redlock.MultiLock, error)
	List(ctx context.Context, o redlock.ListOptions) (redlock.Page, error)
	AcquirePermit(ctx context.Context, name string, o redlock.PermitOptions) (redlock.Permit, error)
	ExtendPermit(ctx context.Context, namespace, name, token string, ttl time.Duration) (redlock.Permit, error)
	ReleasePermit(ctx context.Context, namespace, name, token string) error
	InspectSemaphore(ctx context.Context, namespace, name string) (redlock.SemaphoreInfo, error)
	Status(ctx context.Context) []redlock.NodeStatus
	Explain(err error) redlock.Unavailable
	Quorum() int // the number of nodes a lock needs, of Nodes
	Nodes() int
}

var _ Locker = (*redlock.Coordinator)(nil)
