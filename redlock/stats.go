package redlock

import "sync/atomic"

// counters are the coordinator's statistics, read by Stats.
type counters struct {
	attempts, acquired, held, split, unavailable atomic.Uint64
	waiting                                      atomic.Int64
}

// Stats is a snapshot of a coordinator's counters, for metrics.
type Stats struct {
	Waiting int64 // acquires waiting for a lock now
	// Attempts counts acquire rounds sent to the nodes; Acquired, Held and
	// Unavailable count their outcomes (held: another owner had a quorum).
	Attempts, Acquired, Held, Unavailable uint64
	// SplitVotes counts failed rounds that won some nodes while other owners
	// held fewer than a quorum: contention split the votes so that nobody
	// may have won.
	SplitVotes uint64
}

// Stats returns the coordinator's counters.
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
