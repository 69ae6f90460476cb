package redlock

import (
	"cmp"
	"context"
	"errors"
	"sync"
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
// node; a client hook (arrivals) hands each reply to its round as it comes,
// in the pipeline's goroutine, where the round's tally counts it, and the
// caller wakes once, when the tally says the round is decided.

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

// Per node of a round: waiting for its answer, running the script by EVAL
// after a NOSCRIPT, answered.
const (
	waiting = iota
	evaluating
	answered
)

// round is one script sent to several nodes.
type round[T any] struct {
	c      *Coordinator
	idxs   []int // the nodes it was sent to
	start  time.Time
	script *redis.Script
	keys   []string
	args   []any
	parse  func(*redis.Cmd) (T, error)
	// tally counts each answer that comes before the decision, in arrival
	// order, under mu, and reports whether the outcome is certain; nil
	// awaits every node.
	tally func(reply[T]) bool

	mu       sync.Mutex
	state    []int      // per node index (see waiting)
	got      []reply[T] // the answers counted by tally
	late     []reply[T] // the answers that came after the caller had its outcome
	pending  int        // nodes not answered yet
	detached bool       // the caller has its outcome: later answers are late
	done     bool       // decided is closed
	decided  chan struct{}
	all      chan struct{} // closed when every node answered
}

// roundCmd is one node's command in a round.
type roundCmd struct {
	*redis.Cmd
	round interface {
		arrive(node int, cmd *redis.Cmd, eval bool)
	}
	node int
}

// arrivals is the hook of every node's client that hands a round each of
// its replies: go-redis runs a batch of one command through the process
// hooks, and a larger one through the pipeline hooks.
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
			rc.round.arrive(rc.node, rc.Cmd, false)
		}
	}
}

// isNoScript reports a NOSCRIPT error (the node's script cache was flushed).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// runScript runs script on every node in idxs, with the keys and arguments
// of that node, and returns the answers counted by tally (see round) once
// it is decided, the node timeout is over or ctx ends; the nodes still
// silent then are counted as failed, unless the round was decided. The
// returned round tells what came later (see stragglers). With
// Options.NoBatching each node gets its own goroutine and round trip.
func runScript[T any](ctx context.Context, c *Coordinator, idxs []int, script *redis.Script,
	keys []string, args []any, parse func(*redis.Cmd) (T, error), tally func(reply[T]) bool) ([]reply[T], *round[T]) {
	r := &round[T]{c: c, idxs: idxs, start: time.Now(), script: script, keys: keys, args: args, parse: parse, tally: tally,
		state: make([]int, len(c.nodes)), pending: len(idxs), decided: make(chan struct{}), all: make(chan struct{})}
	if len(idxs) == 0 {
		r.done = true
		close(r.decided)
		close(r.all)
	}
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmds := make([]roundCmd, len(idxs))
	for j, i := range idxs {
		// A command outlives its caller (the pipeline ignores contexts once
		// a command is queued): its answer still counts for the node.
		cmds[j] = roundCmd{Cmd: redis.NewCmd(context.WithoutCancel(ctx), cmdArgs...), round: r, node: i}
		n := c.nodes[i]
		if c.opts.NoBatching {
			go func() {
				nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.NodeTimeout)
				defer cancel()
				_ = n.client.Process(nctx, &cmds[j])
				r.arrive(i, cmds[j].Cmd, false)
			}()
		} else if err := n.pipe.Process(ctx, &cmds[j]); err != nil {
			cmds[j].SetErr(err) // refused without being queued (a full queue, a closed client)
			r.arrive(i, cmds[j].Cmd, false)
		}
	}
	timer := time.NewTimer(c.opts.NodeTimeout)
	select {
	case <-r.decided:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.detached = true
	if !r.done {
		err := cmp.Or(ctx.Err(), context.DeadlineExceeded)
		for _, i := range idxs {
			if r.state[i] != answered {
				r.count(reply[T]{node: i, err: c.nodes[i].fail(err), silent: true})
			}
		}
	}
	return r.got, r
}

// count hands a reply to the tally; under mu.
func (r *round[T]) count(rep reply[T]) {
	r.got = append(r.got, rep)
	if r.tally != nil && r.tally(rep) && !r.done {
		r.done = true
		close(r.decided)
	}
}

// arrive takes node's answer cmd. After a NOSCRIPT (the node lost its
// script cache) the script runs again by EVAL, whose answer is the node's
// (eval). Only the first answer of a node counts.
func (r *round[T]) arrive(node int, cmd *redis.Cmd, eval bool) {
	r.mu.Lock()
	if r.state[node] == answered || (!eval && r.state[node] == evaluating) {
		r.mu.Unlock()
		return
	}
	if !eval && isNoScript(cmd.Err()) {
		r.state[node] = evaluating
		r.mu.Unlock()
		go r.eval(node) // rare: not worth a place in the pipeline's goroutine
		return
	}
	r.state[node] = answered
	r.mu.Unlock()

	n := r.c.nodes[node]
	took := time.Since(r.start)
	n.noteReply(context.Background(), cmd.Err())
	v, err := r.parse(cmd)
	if h := r.c.opts.OnNodeCommand; h != nil {
		h(n.addr, took, err)
	}
	if err != nil {
		err = n.fail(err)
	}
	rep := reply[T]{node: node, val: v, err: err}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.detached {
		r.late = append(r.late, rep)
	} else {
		r.count(rep)
	}
	if r.pending--; r.pending == 0 {
		close(r.all)
		if !r.done {
			r.done = true
			close(r.decided)
		}
	}
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
	r.arrive(node, cmd, true)
}

// stragglers calls f, from a goroutine of its own, with the answers that
// came after the caller had its outcome and the nodes still silent at the
// end of the node timeout (counted from the round's start), once every node
// answered or the node timeout is over; not at all when every node had
// answered before the outcome. A paused node's command may still run when
// the node resumes: f decides what to undo.
func (r *round[T]) stragglers(f func(late []reply[T], silent []int)) {
	r.mu.Lock()
	if r.pending == 0 && len(r.late) == 0 {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	go func() {
		timer := time.NewTimer(r.c.opts.NodeTimeout - time.Since(r.start))
		defer timer.Stop()
		select {
		case <-r.all:
		case <-timer.C:
		}
		r.mu.Lock()
		late := r.late
		var silent []int
		for _, i := range r.idxs {
			if r.state[i] != answered {
				silent = append(silent, i)
			}
		}
		r.mu.Unlock()
		f(late, silent)
	}()
}

// votes is the tally of most rounds: nodes that said yes, that said no, and
// that failed (an error, silence, or a quarantined node, which does not
// vote), out of n nodes asked, q of which must say yes. The outcome is
// certain, and the kind of failure too: "no" (fewer than q can say yes
// however the failures end) or "unavailable" (too many failed to tell).
type votes struct{ n, q, yes, no, bad int }

func (v *votes) decided() bool {
	pending := v.n - v.yes - v.no - v.bad
	return v.yes >= v.q || v.no > v.n-v.q || (v.yes+pending < v.q && v.yes+v.bad >= v.q)
}

// refused reports a failed round where too few failed to explain it: the
// nodes said no.
func (v *votes) refused() bool { return v.yes+v.bad < v.q }
