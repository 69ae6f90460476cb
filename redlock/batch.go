package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// round collects the answers of the nodes to one command: when each came,
// and one wake-up of the caller once the last is in, rather than one per
// node (a round waits for every node but a silent one).
type round struct {
	start   time.Time
	left    atomic.Int32
	all     chan struct{}  // closed when left reaches 0
	arrived []atomic.Int64 // per node: 1 + nanoseconds from start to its answer; 0 until then
}

func newRound(nodes, waiting int) *round {
	r := &round{start: time.Now(), all: make(chan struct{}), arrived: make([]atomic.Int64, nodes)}
	r.left.Store(int32(waiting))
	return r
}

// arrive records that node's command has its result.
func (r *round) arrive(node int) {
	r.arrived[node].Store(1 + int64(time.Since(r.start)))
	if r.left.Add(-1) == 0 {
		close(r.all)
	}
}

// took returns how long node took to answer, and whether it did.
func (r *round) took(node int) (time.Duration, bool) {
	at := r.arrived[node].Load()
	return time.Duration(at - 1), at != 0
}

// evalSha encodes an EVALSHA of script.
func evalSha(script *redis.Script, keys []string, args []any) []byte {
	size := 64 + 16*(len(keys)+len(args)) // headers, EVALSHA, the key count
	for _, k := range keys {
		size += len(k)
	}
	for _, a := range args {
		if s, ok := a.(string); ok {
			size += len(s)
		} else {
			size += 20
		}
	}
	b := appendArrayLen(make([]byte, 0, size+len(script.Hash())), 3+len(keys)+len(args))
	b = appendBulk(b, "EVALSHA")
	b = appendBulk(b, script.Hash())
	b = appendInt(b, int64(len(keys)))
	for _, k := range keys {
		b = appendBulk(b, k)
	}
	return appendArgs(b, args)
}

// isNoScript reports a NOSCRIPT error (the node's script cache was flushed).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// runScript runs script on every node in idxs in parallel, each bounded by
// the node timeout, with the keys and arguments of that node, and returns
// every reply parsed by parse. With batching on, the commands go through the
// nodes' pipelined connections (pipe.go) and no goroutine is started per
// node; otherwise each node gets its own goroutine and round trip
// (Options.NoBatching).
func runScript[T any](ctx context.Context, c *Coordinator, idxs []int, script *redis.Script,
	keys []string, args []any, parse func(result) (T, error)) []reply[T] {
	if c.opts.NoBatching {
		return fanout(ctx, c, idxs, func(ctx context.Context, n *node) (T, error) {
			cmd := script.Run(ctx, n.client, keys, args...)
			return parse(result{cmd.Val(), cmd.Err()})
		})
	}
	// Every call ends by its deadline: the pipe answers it, or fails it
	// when the node is silent that long (see pipe.go). No timer is needed
	// here, only the caller's context.
	rd := newRound(len(c.nodes), len(idxs))
	deadline := rd.start.Add(c.opts.NodeTimeout)
	enc := evalSha(script, keys, args)
	calls := make([]call, len(idxs))
	for j, i := range idxs {
		calls[j] = call{enc: enc, node: i, deadline: deadline, round: rd}
		c.nodes[i].pipe.submit(&calls[j])
	}
	select {
	case <-rd.all:
	case <-ctx.Done():
	}
	out := make([]reply[T], 0, len(idxs))
	for j, i := range idxs {
		took, ok := rd.took(i)
		if !ok { // the caller gave up first
			c.noteCommand(i, time.Since(rd.start), ctx.Err())
			c.nodes[i].noteReply(ctx, ctx.Err())
			out = append(out, reply[T]{node: i, err: c.nodes[i].fail(ctx.Err())})
			continue
		}
		res := calls[j].res
		if isNoScript(res.err) {
			// The node lost its script cache: EVAL it once, directly.
			rctx, rcancel := context.WithTimeout(ctx, c.opts.NodeTimeout)
			cmd := script.Run(rctx, c.nodes[i].client, keys, args...)
			rcancel()
			res = result{cmd.Val(), cmd.Err()}
			took = time.Since(rd.start)
		}
		c.nodes[i].noteReply(ctx, res.err)
		v, err := parse(res)
		c.noteCommand(i, took, err)
		if err != nil {
			err = c.nodes[i].fail(err)
		}
		out = append(out, reply[T]{node: i, val: v, err: err})
	}
	return out
}

// result is one node's reply to a command, as go-redis represents it (a
// string, an int64, a []any, or nil for a null), or its error.
type result struct {
	val any
	err error
}

// Slice returns an array reply.
func (r result) Slice() ([]any, error) {
	if r.err != nil {
		return nil, r.err
	}
	if a, ok := r.val.([]any); ok {
		return a, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %T, want an array", r.val)
}

// Int64 returns an integer reply.
func (r result) Int64() (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	switch v := r.val.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("redis: unexpected reply %T, want an integer", r.val)
}

// int64Reply parses an integer reply.
func int64Reply(r result) (int64, error) { return r.Int64() }
