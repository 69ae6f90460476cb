package redlock

import (
	"context"
	"errors"
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
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "EVALSHA", script.Hash(), len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return appendCommand(make([]byte, 0, 256), append(a, args...)...)
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
	keys []string, args []any, parse func(*redis.Cmd) (T, error)) []reply[T] {
	if c.opts.NoBatching {
		return fanout(ctx, c, idxs, func(ctx context.Context, n *node) (T, error) {
			return parse(script.Run(ctx, n.client, keys, args...))
		})
	}
	nctx, cancel := context.WithTimeout(ctx, c.opts.NodeTimeout)
	defer cancel()
	rd := newRound(len(c.nodes), len(idxs))
	deadline, _ := nctx.Deadline()
	enc := evalSha(script, keys, args)
	cmds := make([]*redis.Cmd, len(c.nodes))
	calls := make([]call, len(idxs))
	for j, i := range idxs {
		cmds[i] = redis.NewCmd(nctx)
		calls[j] = call{enc: enc, cmd: cmds[i], node: i, deadline: deadline, round: rd}
		c.nodes[i].pipe.submit(&calls[j])
	}
	select {
	case <-rd.all:
	case <-nctx.Done():
	}
	out := make([]reply[T], 0, len(idxs))
	for _, i := range idxs {
		took, ok := rd.took(i)
		if !ok { // silent until the node timeout
			c.noteCommand(i, time.Since(rd.start), nctx.Err())
			c.nodes[i].noteReply(ctx, nctx.Err())
			out = append(out, reply[T]{node: i, err: c.nodes[i].fail(nctx.Err())})
			continue
		}
		cmd := cmds[i]
		if isNoScript(cmd.Err()) {
			// The node lost its script cache: EVAL it once, directly.
			rctx, rcancel := context.WithTimeout(ctx, c.opts.NodeTimeout)
			cmd = script.Run(rctx, c.nodes[i].client, keys, args...)
			rcancel()
			took = time.Since(rd.start)
		}
		c.nodes[i].noteReply(ctx, cmd.Err())
		v, err := parse(cmd)
		c.noteCommand(i, took, err)
		if err != nil {
			err = c.nodes[i].fail(err)
		}
		out = append(out, reply[T]{node: i, val: v, err: err})
	}
	return out
}

// int64Reply parses an integer reply.
func int64Reply(cmd *redis.Cmd) (int64, error) { return cmd.Int64() }
