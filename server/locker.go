package server

import (
	"context"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// Locker is what the server needs from the lock coordinator. It is satisfied
// by *redlock.Coordinator; tests use a fake.
type Locker interface {
	// Acquire takes the lock on resource (see redlock.Coordinator.Acquire).
	Acquire(ctx context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error)
	// Release deletes the lock held with token.
	Release(ctx context.Context, namespace, resource, token string) error
	// Extend makes the lock held with token valid for ttl from now.
	Extend(ctx context.Context, namespace, resource, token string, ttl time.Duration) (redlock.Lock, error)
	// Inspect tells who holds the lock, without its token.
	Inspect(ctx context.Context, namespace, resource string) (redlock.Info, error)
	// Status reports the health of every node.
	Status(ctx context.Context) []redlock.NodeStatus
	// Quorum is the number of nodes a lock needs, of Nodes.
	Quorum() int
	Nodes() int
}

var _ Locker = (*redlock.Coordinator)(nil)
