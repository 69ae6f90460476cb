package redlock

import (
	"context"
	"sync/atomic"
)

// counters are the coordinator's statistics, read by Stats: the Observer
// every coordinator has, before Options.Observer.
type counters struct {
	NopObserver
	attempts, acquired, held, split, unavailable atomic.Uint64
	waiting                                      atomic.Int64
}

func (s *counters) Decided(_ context.Context, d Decision) {
	if d.Round {
		s.attempts.Add(1)
	}
	if d.Split {
		s.split.Add(1)
	}
	switch d.Outcome {
	case OutcomeAcquired:
		s.acquired.Add(1)
	case OutcomeHeld:
		s.held.Add(1)
	case OutcomeUnavailable:
		s.unavailable.Add(1)
	}
}

func (s *counters) Waiting(_ context.Context, delta int) { s.waiting.Add(int64(delta)) }

// Stats is a snapshot of a coordinator's counters.
type Stats struct {
	Waiting int64 // acquires waiting for a lock now
	// Attempts counts acquire rounds sent to the nodes, as they end;
	// Acquired, Held and Unavailable count the outcomes of acquires (see
	// Decision: rounds, and answers given without one).
	Attempts, Acquired, Held, Unavailable uint64
	// SplitVotes counts failed rounds that won some nodes while other owners
	// held fewer than a quorum: contention split the votes so that nobody
	// may have won.
	SplitVotes uint64
}

// Stats returns the coordinator's counters: what its Observer was told, counted.
func (c *Coordinator) Stats() Stats {
	return Stats{
		Waiting:     c.stats.waiting.Load(),
		Attempts:    c.stats.attempts.Load(),
		Acquired:    c.stats.acquired.Load(),
		Held:        c.stats.held.Load(),
		Unavailable: c.stats.unavailable.Load(),
		SplitVotes:  c.stats.split.Load(),
	}
}
