package redlock

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Command batching: a round submits its command to every node's go-redis
// automatic pipeline (AsyncAutoPipeline: one batch in flight per node, so
// concurrent requests share round trips) without a goroutine per node; the
// clients' hooks tell the round when each reply is in (see arrivals), and the
// caller wakes once. docs/design.md says what a late command costs.

// maxQueued bounds the commands queued for one node and not yet answered:
// beyond it a command fails at once (the node is silent for that round).
var maxQueued = 4096 // a variable for tests

// round collects the answers of the nodes to one command: when each came,
// and one wake-up of the caller once the last is in.
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

// arrive records that node's command has its result; only the first call
// per node counts.
func (r *round) arrive(node int) {
	if r.arrived[node].CompareAndSwap(0, 1+int64(time.Since(r.start))) && r.left.Add(-1) == 0 {
		close(r.all)
	}
}

// took returns how long node took to answer, and whether it did.
func (r *round) took(node int) (time.Duration, bool) {
	at := r.arrived[node].Load()
	return time.Duration(at - 1), at != 0
}

// roundCmd is one node's command in a round.
type roundCmd struct {
	*redis.Cmd
	round *round
	node  int
}

// arrivals is the hook of every node's client that tells a round when its
// command has its reply: go-redis runs a batch of one command through the
// process hooks, and a larger one through the pipeline hooks.
type arrivals struct{}

func (arrivals) DialHook(next redis.DialHook) redis.DialHook { return next }
func (arrivals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		defer arrive(cmd)
		return next(ctx, cmd)
	}
}
func (arrivals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer arrive(cmds...)
		return next(ctx, cmds)
	}
}

func arrive(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if rc, ok := c.(*roundCmd); ok {
			rc.round.arrive(rc.node)
		}
	}
}

// isNoScript reports a NOSCRIPT error (the node's script cache was flushed).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// reply is one node's answer in a fan-out.
type reply[T any] struct {
	node int
	val  T
	err  error
}

// runScript runs script on every node in idxs in parallel, each bounded by
// the node timeout, with the keys and arguments of that node, and returns
// every reply parsed by parse (a silent node's is its context error). With
// batching on, the commands go through the nodes' automatic pipelines;
// otherwise each node gets its own goroutine and round trip
// (Options.NoBatching).
func runScript[T any](ctx context.Context, c *Coordinator, idxs []int, script *redis.Script,
	keys []string, args []any, parse func(*redis.Cmd) (T, error)) []reply[T] {
	rd := newRound(len(c.nodes), len(idxs))
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmds := make([]roundCmd, len(idxs))
	for j, i := range idxs {
		cmds[j] = roundCmd{Cmd: redis.NewCmd(ctx, cmdArgs...), round: rd, node: i}
		n := c.nodes[i]
		if c.opts.NoBatching {
			go func() {
				nctx, cancel := context.WithTimeout(ctx, c.opts.NodeTimeout)
				defer cancel()
				_ = n.client.Process(nctx, &cmds[j])
				rd.arrive(i)
			}()
		} else if err := n.pipe.Process(ctx, &cmds[j]); err != nil {
			rd.arrive(i) // refused without being queued (a full queue, a closed client)
		}
	}
	timer := time.NewTimer(c.opts.NodeTimeout)
	select {
	case <-rd.all:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	// Nodes that lost their script cache (NOSCRIPT) run it once by EVAL,
	// all at once.
	evals := make([]*redis.Cmd, len(idxs))
	for j, i := range idxs {
		if _, ok := rd.took(i); ok && isNoScript(cmds[j].Err()) {
			// Bounded by the connection's deadlines: the node timeout.
			var s redis.Scripter = c.nodes[i].client
			if c.nodes[i].pipe != nil {
				s = c.nodes[i].pipe
			}
			evals[j] = script.Eval(ctx, s, keys, args...)
		}
	}
	out := make([]reply[T], 0, len(idxs))
	for j, i := range idxs {
		n := c.nodes[i]
		var v T
		took, ok := rd.took(i)
		err := cmp.Or(ctx.Err(), context.DeadlineExceeded)
		if !ok { // silent for the node timeout, or the caller gave up first
			took = time.Since(rd.start)
			n.noteReply(ctx, err)
		} else {
			cmd := cmds[j].Cmd
			if evals[j] != nil {
				cmd = evals[j]
				_ = cmd.Err() // awaits the reply
				took = time.Since(rd.start)
			}
			n.noteReply(ctx, cmd.Err())
			v, err = parse(cmd)
		}
		if h := c.opts.OnNodeCommand; h != nil {
			h(n.addr, took, err)
		}
		if err != nil {
			err = n.fail(err)
		}
		out = append(out, reply[T]{node: i, val: v, err: err})
	}
	return out
}
