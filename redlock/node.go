package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one Redis master.
type node struct {
	idx    int
	addr   string // host:port, never credentials
	client *redis.Client
}

// newNode makes the client of one node. Every command is bounded by the
// caller's context (the per-node timeout), never retried, and dialling and
// waiting for a pooled connection are bounded by the node timeout too.
func newNode(idx int, o *redis.Options, timeout time.Duration) *node {
	opt := *o
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialTimeout = timeout
	opt.ReadTimeout = timeout
	opt.WriteTimeout = timeout
	opt.PoolTimeout = timeout
	return &node{idx: idx, addr: opt.Addr, client: redis.NewClient(&opt)}
}

// reply is one node's answer in a fan-out.
type reply[T any] struct {
	node int
	val  T
	err  error
}

// fanout calls fn on every node in idxs in parallel, each under its own
// per-node timeout, and returns every reply (a timed-out node returns its
// context error). It waits at most the node timeout.
func fanout[T any](ctx context.Context, c *Coordinator, idxs []int, fn func(ctx context.Context, n *node) (T, error)) []reply[T] {
	ch := make(chan reply[T], len(idxs))
	for _, i := range idxs {
		go func(n *node) {
			nctx, cancel := context.WithTimeout(ctx, c.opts.NodeTimeout)
			defer cancel()
			v, err := fn(nctx, n)
			if err != nil {
				err = &NodeError{Node: n.idx, Addr: n.addr, Err: err}
			}
			ch <- reply[T]{node: n.idx, val: v, err: err}
		}(c.nodes[i])
	}
	out := make([]reply[T], 0, len(idxs))
	for range idxs {
		out = append(out, <-ch)
	}
	return out
}

// all returns the indexes of every node.
func (c *Coordinator) all() []int {
	idxs := make([]int, len(c.nodes))
	for i := range idxs {
		idxs[i] = i
	}
	return idxs
}
