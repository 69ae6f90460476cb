package redlock

import (
	"context"
	"time"
)

// Observer receives a coordinator's events (Options.Observer), for metrics
// and tracing: the one route by which the engine reports what it does. Its
// methods are called from many goroutines at once, on the lock operations'
// paths, and must not block. ctx is the context of the caller the event
// serves (for a batch several callers share, the first one's; see batch.go),
// or context.Background() for work of the coordinator's own (stragglers,
// the census). Embed NopObserver to implement only some of the methods.
type Observer interface {
	// NodeCommand: one call to one node in a fan-out ended, after took,
	// with its error (a node still silent at the node timeout reports
	// context.DeadlineExceeded). node is host:port, never credentials.
	NodeCommand(ctx context.Context, node string, took time.Duration, err error)
	// Decided: an acquire was decided (see Decision).
	Decided(ctx context.Context, d Decision)
	// Waiting: an acquire with a wait joined (+1) or left (-1) this
	// coordinator's queue of waiters.
	Waiting(ctx context.Context, delta int)
	// Waited: an acquire with a wait ended after took, with or without the
	// lock.
	Waited(ctx context.Context, took time.Duration, acquired bool)
	// Census: a key census completed (see Coordinator.Census).
	Census(c Census)
}

// Outcome is how an acquire was decided.
type Outcome int

const (
	OutcomeAcquired    Outcome = iota // a quorum granted it, or a retry found it held by its token
	OutcomeHeld                       // another owner holds it (ErrLockHeld)
	OutcomeUnavailable                // too few nodes answered (ErrQuorumUnavailable)
)

// String is the outcome's name: "acquired", "held" or "unavailable".
func (o Outcome) String() string {
	switch o {
	case OutcomeAcquired:
		return "acquired"
	case OutcomeHeld:
		return "held"
	case OutcomeUnavailable:
		return "unavailable"
	}
	return "unknown"
}

// Decision is one decision of an acquire: the end of an acquire round
// (a waiting acquire may make several; a semaphore's hand-over is one), or
// an answer given without one (Round false).
type Decision struct {
	Outcome Outcome
	// Round: an acquire round sent to the nodes decided it. Not: this
	// coordinator did, refusing an acquire without a wait while waiters
	// here come first, or recognising the retry of an acquire its client
	// token holds already (re-acquired as an extend is, not by a round).
	Round bool
	// Split: a failed round won some nodes while the other owners held
	// fewer than a quorum: contention split the votes, so that nobody may
	// have won.
	Split bool
}

// NopObserver does nothing with any event: embed it in an Observer that
// needs only some of them.
type NopObserver struct{}

func (NopObserver) NodeCommand(context.Context, string, time.Duration, error) {}
func (NopObserver) Decided(context.Context, Decision)                         {}
func (NopObserver) Waiting(context.Context, int)                              {}
func (NopObserver) Waited(context.Context, time.Duration, bool)               {}
func (NopObserver) Census(Census)                                             {}

// Observers returns an Observer that hands each event to every one of obs
// in turn, skipping nil ones.
func Observers(obs ...Observer) Observer {
	var all fanOut
	for _, o := range obs {
		switch o := o.(type) {
		case nil:
		case fanOut:
			all = append(all, o...)
		default:
			all = append(all, o)
		}
	}
	if len(all) == 1 {
		return all[0]
	}
	return all
}

// fanOut is Observers' result.
type fanOut []Observer

func (f fanOut) NodeCommand(ctx context.Context, node string, took time.Duration, err error) {
	for _, o := range f {
		o.NodeCommand(ctx, node, took, err)
	}
}

func (f fanOut) Decided(ctx context.Context, d Decision) {
	for _, o := range f {
		o.Decided(ctx, d)
	}
}

func (f fanOut) Waiting(ctx context.Context, delta int) {
	for _, o := range f {
		o.Waiting(ctx, delta)
	}
}

func (f fanOut) Waited(ctx context.Context, took time.Duration, acquired bool) {
	for _, o := range f {
		o.Waited(ctx, took, acquired)
	}
}

func (f fanOut) Census(c Census) {
	for _, o := range f {
		o.Census(c)
	}
}

// nodeCommand tells the observers of one call to node n.
func (c *Coordinator) nodeCommand(ctx context.Context, n *node, took time.Duration, err error) {
	c.obs.NodeCommand(ctx, n.addr, took, err)
}
