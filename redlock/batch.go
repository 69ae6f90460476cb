package redlock

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Rounds. A round sends one script to several nodes at once and is decided
// as soon as its outcome is certain from the answers so far (a quorum
// granted, or too many refused or failed for one), like a Raft commit at
// the quorum-th fastest replica: a slow or paused minority never slows it.
// The commands still out finish in the background (see stragglers).
//
// With batching on (the default) the commands go through each node's
// go-redis automatic pipeline (AsyncAutoPipeline: one batch in flight per
// node, so concurrent requests share round trips) without a goroutine per
// command: a node's commands complete in the order they were sent (one
// ordered stream), so one goroutine per node (node.await) waits for them in
// that order and tells each round as its reply is in, and the caller wakes
// once enough nodes answered to decide (the quorum, or the refusals that
// rule one out), reads them and counts them (its tally); more often only
// when those did not decide. No hook is needed for it: a client hook makes
// go-redis read the goroutine id of every batch (its guard against a hook
// that reads a result in the pipeline's own goroutine), a cost the
// coordinator adds only with Options.ClientHook (see callers).

// maxQueued bounds the commands queued for one node and not yet answered:
// beyond it a command fails at once (the node is silent for that round).
var maxQueued = 4096 // a variable for tests

// reply is one node's answer in a round.
type reply[T any] struct {
	node   int
	val    T
	err    error
	silent bool // no answer when the caller took its outcome (err says why)
}

// round is one script sent to several nodes.
type round[T any] struct {
	c      *Coordinator
	idxs   []int // the nodes it was sent to
	start  time.Time
	script *redis.Script
	keys   []string
	args   []any
	parse  func(*redis.Cmd) (T, error)
	cmds   []roundCmd     // by position in idxs
	evals  []*redis.Cmd   // per node: the EVAL after a NOSCRIPT, if any
	at     []atomic.Int64 // per node: 1 + nanoseconds from start to its answer; 0 until then
	seen   []bool         // per node: its answer was counted (by the caller, or as a straggler)
	count  atomic.Int32   // answers so far
	need   int32          // answers before the caller first looks: the fewest that can decide
	wake   chan struct{}  // the caller looks again (capacity 1)
	all    chan struct{}  // closed when every node answered
}

// roundCmd is one node's command in a round.
type roundCmd struct {
	*redis.Cmd
	ctx   context.Context // the caller's, without its cancellation: see callers
	round interface{ arrive(node int) }
	node  int
}

// callers is the hook that hands the hooks of Options.ClientHook (such as
// tracing) the context of a round's caller instead of the pipeline's own
// (go-redis runs every batch on a context of its own): that of the command,
// or of a batch's first command (a batch shared by several callers is one
// call to the hooks). It is the outermost hook, added only with a
// ClientHook: any hook makes go-redis read the goroutine id of every batch.
type callers struct{}

func (callers) DialHook(next redis.DialHook) redis.DialHook { return next }
func (callers) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return next(callerCtx(ctx, cmd), cmd)
	}
}
func (callers) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 {
			ctx = callerCtx(ctx, cmds[0])
		}
		return next(ctx, cmds)
	}
}

// callerCtx is the context of cmd's caller if it is a round's command, else ctx.
func callerCtx(ctx context.Context, cmd redis.Cmder) context.Context {
	if rc, ok := cmd.(*roundCmd); ok {
		return rc.ctx
	}
	return ctx
}

// send queues rc on the node's automatic pipeline, and for await. The lock
// keeps sent in the order of the pipeline's queue, so that await never waits
// for a command behind one already answered. It returns the error of a
// command refused without being queued (a full queue, a closed client).
func (n *node) send(ctx context.Context, rc *roundCmd) error {
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	if n.closed {
		return redis.ErrClosed
	}
	if err := n.pipe.Process(ctx, rc); err != nil {
		return err
	}
	n.sent <- rc // never waits: see newNode
	return nil
}

// await tells each round command sent to the node its arrival, in the order
// sent, which is the order of their answers (the pipeline runs one batch at
// a time, in order): the wait for a command ends when its batch has its
// replies, and the commands after it in the same batch are answered too.
// It returns once close closed sent.
func (n *node) await() {
	for rc := range n.sent {
		_ = rc.Err() // waits until its batch has its replies
		rc.round.arrive(rc.node)
	}
}

// isNoScript reports a NOSCRIPT error (the node's script cache was flushed).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// runScript runs script on every node in idxs, with the keys and arguments
// of that node, and returns the answers counted by tally once it says the
// round is decided (nil: once every node answered), the node timeout is over
// or ctx ends; the nodes still silent then are counted as failed, unless the
// round was decided. tally runs in the caller's goroutine, which wakes when
// enough nodes answered to decide, and again as more answer if they did not.
// The caller must then call stragglers on the returned round. With
// Options.NoBatching each node gets its own goroutine and round trip.
func runScript[T any](ctx context.Context, c *Coordinator, idxs []int, script *redis.Script,
	keys []string, args []any, parse func(*redis.Cmd) (T, error), tally func(reply[T]) bool) ([]reply[T], *round[T]) {
	r := sendScript(ctx, c, idxs, script, keys, args, parse, tally == nil)
	return r.decide(ctx, tally), r
}

// sendScript sends script to every node in idxs, as runScript does, and
// returns its round without waiting for an answer: the commands are queued
// on each node's ordered stream, ahead of any sent after it returns. all
// says that the caller waits for every answer (no tally).
func sendScript[T any](ctx context.Context, c *Coordinator, idxs []int, script *redis.Script,
	keys []string, args []any, parse func(*redis.Cmd) (T, error), all bool) *round[T] {
	n := len(c.nodes)
	r := &round[T]{c: c, idxs: idxs, start: time.Now(), script: script, keys: keys, args: args, parse: parse,
		cmds: make([]roundCmd, len(idxs)), evals: make([]*redis.Cmd, n), at: make([]atomic.Int64, n), seen: make([]bool, n),
		need: int32(max(1, min(c.quorum, len(idxs)-c.quorum+1))), wake: make(chan struct{}, 1), all: make(chan struct{})}
	if all {
		r.need = int32(len(idxs))
	}
	if len(idxs) == 0 {
		close(r.all)
	}
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	// A command outlives its caller (the pipeline ignores contexts once a
	// command is queued): its answer still counts for the node.
	cctx := context.WithoutCancel(ctx)
	for j, i := range idxs {
		r.cmds[j] = roundCmd{Cmd: redis.NewCmd(cctx, cmdArgs...), ctx: cctx, round: r, node: i}
		nd := c.nodes[i]
		if err := nd.aliasErr(); err != nil {
			r.cmds[j].SetErr(err) // one server must not answer twice
			r.arrive(i)
		} else if c.opts.NoBatching {
			go func() {
				nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.NodeTimeout)
				defer cancel()
				_ = nd.client.Process(nctx, &r.cmds[j])
				r.arrive(i)
			}()
		} else if err := nd.send(ctx, &r.cmds[j]); err != nil {
			r.cmds[j].SetErr(err) // refused without being queued (a full queue, a closed client)
			r.arrive(i)
		}
	}
	return r
}

// decide waits for the answers of r's nodes and returns them as counted by
// tally once it says the round is decided (nil: once every node answered),
// the node timeout is over or ctx ends (see runScript).
func (r *round[T]) decide(ctx context.Context, tally func(reply[T]) bool) []reply[T] {
	c, idxs := r.c, r.idxs
	timer := time.NewTimer(c.opts.NodeTimeout)
	defer timer.Stop()
	var got []reply[T]
	for decided := false; !decided; {
		over := false
		select {
		case <-r.wake:
		case <-timer.C:
			over = true
		case <-ctx.Done():
			over = true
		}
		for j, i := range idxs {
			if r.seen[i] || r.at[i].Load() == 0 {
				continue
			}
			rep, ok := r.reply(j, i)
			if !ok {
				continue // its script runs again by EVAL
			}
			got = append(got, rep)
			if tally != nil && tally(rep) {
				decided = true
				break
			}
		}
		if r.seenAll() {
			decided = true
		}
		if over && !decided {
			err := cmp.Or(ctx.Err(), context.DeadlineExceeded)
			for _, i := range idxs {
				if !r.seen[i] {
					rep := reply[T]{node: i, err: c.nodes[i].fail(err), silent: true}
					got = append(got, rep)
					if tally != nil {
						tally(rep)
					}
				}
			}
			decided = true
		}
	}
	return got
}

// seenAll reports whether every node's answer was counted.
func (r *round[T]) seenAll() bool {
	for _, i := range r.idxs {
		if !r.seen[i] {
			return false
		}
	}
	return true
}

// arrive records that node's command has its reply (the first time only),
// and wakes the caller once enough nodes answered to decide.
func (r *round[T]) arrive(node int) {
	if !r.at[node].CompareAndSwap(0, 1+int64(time.Since(r.start))) {
		return
	}
	switch n := r.count.Add(1); {
	case int(n) == len(r.idxs):
		close(r.all)
		fallthrough
	case n >= r.need:
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// reply reads node's answer (j is its position in idxs), notes it for the
// node's health and the observers, and marks it seen; after a NOSCRIPT it
// starts the EVAL instead and reports false.
func (r *round[T]) reply(j, node int) (reply[T], bool) {
	cmd := r.cmds[j].Cmd
	if e := r.evals[node]; e != nil {
		cmd = e
	} else if isNoScript(cmd.Err()) {
		r.at[node].Store(0)                // the EVAL's answer arrives anew
		r.c.bg.Go(func() { r.eval(node) }) // rare
		return reply[T]{}, false
	}
	r.seen[node] = true
	n := r.c.nodes[node]
	n.noteReply(context.Background(), cmd.Err())
	v, err := r.parse(cmd)
	r.c.nodeCommand(r.cmds[j].ctx, n, time.Duration(r.at[node].Load()-1), err)
	if err != nil {
		err = n.fail(err)
	}
	return reply[T]{node: node, val: v, err: err}, true
}

// peek returns the answers that arrived but were not counted (the round was
// decided without them), parsed; they are still the stragglers'.
func (r *round[T]) peek() []reply[T] {
	var got []reply[T]
	for j, i := range r.idxs {
		if r.seen[i] || r.at[i].Load() == 0 || r.evals[i] != nil {
			continue
		}
		v, err := r.parse(r.cmds[j].Cmd)
		got = append(got, reply[T]{node: i, val: v, err: err})
	}
	return got
}

// eval runs the round's script by EVAL on node, bounded by the node timeout.
func (r *round[T]) eval(node int) {
	n := r.c.nodes[node]
	ctx, cancel := context.WithTimeout(context.Background(), r.c.opts.NodeTimeout)
	defer cancel()
	var s redis.Scripter = n.client
	if n.pipe != nil {
		s = n.pipe
	}
	cmd := r.script.Eval(ctx, s, r.keys, r.args...)
	_ = cmd.Err() // awaits the reply
	r.evals[node] = cmd
	r.arrive(node)
}

// stragglers hands the nodes not counted by the caller to a goroutine of
// their own, which waits until every node answered or the node timeout
// (from the round's start) is over, notes the late answers for the nodes'
// health and the observers (the nodes still silent as timed out), and calls
// f (if not nil) with them and with the nodes still silent. A paused node's
// command may still run when it resumes: f decides what to undo. Nothing
// when every node was counted.
func (r *round[T]) stragglers(f func(late []reply[T], silent []int)) {
	if r.seenAll() {
		return
	}
	r.c.bg.Go(func() {
		timer := time.NewTimer(r.c.opts.NodeTimeout - time.Since(r.start))
		defer timer.Stop()
		select {
		case <-r.all:
		case <-timer.C:
		}
		var late []reply[T]
		var silent []int
		// A silent node timed out: it counts as a failed call, as a node
		// that answers with an error does (paused or partitioned nodes
		// would otherwise never show in the metrics).
		timedOut := func(j, i int) {
			silent = append(silent, i)
			r.c.nodeCommand(r.cmds[j].ctx, r.c.nodes[i], time.Since(r.start), context.DeadlineExceeded)
		}
		for j, i := range r.idxs {
			switch {
			case r.seen[i]:
			case r.at[i].Load() == 0:
				timedOut(j, i)
			default:
				if rep, ok := r.reply(j, i); ok {
					late = append(late, rep)
				} else {
					timedOut(j, i) // its EVAL is too late to wait for
				}
			}
		}
		if f != nil {
			f(late, silent)
		}
	})
}
