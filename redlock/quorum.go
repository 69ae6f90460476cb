package redlock

import (
	"errors"
	"slices"
	"time"
)

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

// abstention is why node's answer (err: its error) casts no vote: its
// error, or its quarantine (see node.quarantined); nil when it votes.
func (c *Coordinator) abstention(node int, err error) error {
	switch {
	case err != nil:
		return err
	case c.nodes[node].quarantined(time.Now()):
		return c.nodes[node].fail(errQuarantined)
	}
	return nil
}

// validity is what is left of ttl after elapsed time and clock drift.
func (c *Coordinator) validity(ttl time.Duration, start time.Time) time.Duration {
	drift := time.Duration(float64(ttl)*c.opts.DriftFactor) + constDrift
	return ttl - time.Since(start) - drift
}

// freeIn estimates when a lock held on the nodes with these remaining TTLs
// (ms) will be free on a quorum: the k-th smallest TTL, where k nodes must
// expire for a quorum to be free (a TTL of 0 expires now: 1ms). 0 if
// unknown (a key without a TTL, -1). A round decided at the quorum has the
// TTLs of the first refusals only, so k is often 1.
func freeIn(pttls []int64, nodes, quorum int) time.Duration {
	k := quorum - (nodes - len(pttls)) // holders that must expire
	if k <= 0 || k > len(pttls) {
		return 0
	}
	slices.Sort(pttls)
	if pttls[k-1] < 0 {
		return 0
	}
	return time.Duration(max(pttls[k-1], 1)) * time.Millisecond
}

// unavailable is ErrQuorumUnavailable joined with the errors of the nodes
// that did not vote.
func unavailable(errs []error) error {
	return errors.Join(append([]error{ErrQuorumUnavailable}, errs...)...)
}

// notOwner tells ErrHeldByOther from ErrLockExpired by how many nodes
// answered that another token holds the lock.
func (c *Coordinator) notOwner(other int) error {
	if other >= c.quorum {
		return ErrHeldByOther
	}
	return ErrLockExpired
}
