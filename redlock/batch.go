package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Command batching (auto-pipelining).
//
// Every node has a queue and a worker. The worker takes the first queued
// command and every other command already queued (up to maxBatch) and sends
// them to the node as one pipeline: concurrent requests share round trips and
// syscalls, and a lone request is sent at once, with no added delay. Callers
// keep their own per-node timeout: a caller stops waiting at its deadline
// whatever the pipeline it is in is doing.
//
// One pipeline in flight per node makes the largest batches: with 64
// concurrent clients on 5 local nodes, one worker per node gave 3.2 times the
// cycles/s of one goroutine per command, two gave 3.1 and four 2.9 (the
// commands queued while a pipeline is out go together in the next one).

const (
	batchWorkers = 1   // pipelines in flight per node
	maxBatch     = 512 // commands per pipeline
)

// call is one command queued for a node.
type call struct {
	ctx   context.Context
	cmd   *redis.Cmd
	node  int
	round *round // told when cmd has its result
}

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

// batcher is a node's queue and its workers.
type batcher struct {
	client *redis.Client
	queue  chan *call
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newBatcher(client *redis.Client) *batcher {
	b := &batcher{client: client, queue: make(chan *call, 4096), stop: make(chan struct{})}
	for range batchWorkers {
		b.wg.Add(1)
		go b.work()
	}
	return b
}

// close stops the workers; queued calls get an error.
func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
	for {
		select {
		case c := <-b.queue:
			c.cmd.SetErr(redis.ErrClosed)
			c.round.arrive(c.node)
		default:
			return
		}
	}
}

func (b *batcher) work() {
	defer b.wg.Done()
	batch := make([]*call, 0, maxBatch)
	for {
		select {
		case <-b.stop:
			return
		case c := <-b.queue:
			batch = append(batch[:0], c)
		}
	more:
		for len(batch) < maxBatch {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break more
			}
		}
		b.send(batch)
		clear(batch)
	}
}

// send runs the live calls of batch as one pipeline, bounded by the latest
// of their deadlines, and reports each.
func (b *batcher) send(batch []*call) {
	var deadline time.Time
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err)
			c.round.arrive(c.node)
			continue
		}
		if d, ok := c.ctx.Deadline(); ok && d.After(deadline) {
			deadline = d
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if len(live) == 1 {
		_ = b.client.Process(ctx, live[0].cmd)
	} else {
		pipe := b.client.Pipeline()
		for _, c := range live {
			_ = pipe.Process(ctx, c.cmd)
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, c := range live {
		c.round.arrive(c.node)
	}
}

// evalSha builds an EVALSHA command for script.
func evalSha(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	return redis.NewCmd(ctx, a...)
}

// isNoScript reports a NOSCRIPT error (the node's script cache was flushed).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// runScript runs script on every node in idxs in parallel, each bounded by
// the node timeout, with the keys and arguments of that node, and returns
// every reply parsed by parse. With batching on, the commands go through the
// nodes' queues and no goroutine is started per node; otherwise each node
// gets its own goroutine and round trip (Options.NoBatching).
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
	cmds := make([]*redis.Cmd, len(c.nodes))
	for _, i := range idxs {
		cmds[i] = evalSha(nctx, script, keys, args)
		cl := &call{ctx: nctx, cmd: cmds[i], node: i, round: rd}
		select {
		case c.nodes[i].batch.queue <- cl:
		default: // queue full: the node is far behind; count it silent
			cmds[i].SetErr(errors.New("node queue full"))
			rd.arrive(i)
		}
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
