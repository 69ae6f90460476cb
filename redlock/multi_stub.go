package redlock

// TEMPORARY stub of the multi-resource API (h-multi builds it); dropped at merge.

import (
	"context"
	"time"

	"github.com/redlockd/redlockd/internal/valid"
)

const MaxResources = valid.MaxResources

type MultiLock struct {
	Namespace             string
	Resources             []string
	Token                 string
	Fences                []int64
	Owner                 string
	TTL, Validity         time.Duration
	Start, Until          time.Time
	Nodes, Quorum, Locked int
}

func (c *Coordinator) AcquireMulti(ctx context.Context, resources []string, o AcquireOptions) (MultiLock, error) {
	return MultiLock{}, ErrQuorumUnavailable
}

func (c *Coordinator) ExtendMulti(ctx context.Context, namespace string, resources []string, token string, ttl time.Duration) (MultiLock, error) {
	return MultiLock{}, ErrQuorumUnavailable
}

func (c *Coordinator) ReleaseMulti(ctx context.Context, namespace string, resources []string, token string) error {
	return ErrQuorumUnavailable
}
