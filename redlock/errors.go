package redlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors, for errors.Is: the coordinator wraps and joins them with
// node errors and context errors.
var (
	// ErrLockHeld means another token holds the lock (on enough nodes that a
	// quorum could not be reached). The returned error is a *HeldError.
	ErrLockHeld = errors.New("redlock: lock held by another owner")

	// ErrNotOwner means the token does not hold the lock on a quorum. It is
	// always returned wrapped as ErrLockExpired or ErrHeldByOther.
	ErrNotOwner = errors.New("redlock: not the lock owner")

	// ErrLockExpired means nobody holds the lock any more: it expired or was
	// released before. It wraps ErrNotOwner.
	ErrLockExpired = fmt.Errorf("%w: lock expired or released", ErrNotOwner)

	// ErrHeldByOther means another token holds the lock now. It wraps ErrNotOwner.
	ErrHeldByOther = fmt.Errorf("%w: lock held by another owner", ErrNotOwner)

	// ErrQuorumUnavailable means too few nodes voted (or validity ran out)
	// to decide: try again later. Coordinator.Explain tells whether the
	// outcome is unknown or the request was not granted, and when a quorum
	// votes again.
	ErrQuorumUnavailable = errors.New("redlock: quorum unavailable")

	// ErrNotHeld means no token holds the lock on a quorum (Inspect).
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrInvalid wraps every argument error (bad resource, ttl, token, ...).
	ErrInvalid = errors.New("redlock: invalid argument")

	// ErrSameServer means two nodes reach one Redis server (the same
	// run_id): the later found never votes (see CheckIdentities).
	ErrSameServer = errors.New("redlock: two nodes reach one Redis server")
)

// HeldError is returned by Acquire when the lock is held by another owner.
type HeldError struct {
	// Remaining is the holder's remaining TTL as seen by the nodes that refused
	// (the largest of a quorum), a hint for when to try again; 0 if unknown.
	Remaining time.Duration
}

func (e *HeldError) Error() string { return ErrLockHeld.Error() }

// Unwrap returns ErrLockHeld.
func (e *HeldError) Unwrap() error { return ErrLockHeld }

// NodeError is the error of one node, identified by its index and address.
// Several are joined with errors.Join under ErrQuorumUnavailable.
type NodeError struct {
	Node int
	Addr string
	Err  error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock: node %d (%s): %v", e.Node, e.Addr, e.Err)
}

// Unwrap returns the node's underlying error.
func (e *NodeError) Unwrap() error { return e.Err }

// errQuarantined marks a node that answered but does not vote (restart or
// replica quarantine).
var errQuarantined = errors.New("in quarantine")

// Unavailable is what an ErrQuorumUnavailable error says about the nodes
// that did not vote, as counted by Explain.
type Unavailable struct {
	// Refused counts the nodes that answered with a Redis error, by its
	// first word (READONLY, OOM, NOAUTH, ERR, ...).
	Refused map[string]int
	Silent  int // did not answer within the node timeout, or the caller gave up
	// Unreachable is how many could not be reached (connection refused or
	// cut, or another error that is no Redis answer).
	Unreachable int
	Quarantined int // answered but do not vote yet (restart or replica quarantine)
	Aliased     int // reach the same server as another node: never vote (see CheckIdentities)
	// NotGranted reports that fewer than a quorum of voting nodes can have
	// applied the request (every other one refused it, could not be
	// reached, or does not vote), so it took effect on no quorum. Otherwise
	// the outcome is unknown. Only Coordinator.Explain sets it.
	NotGranted bool
	// VotesAgainIn is how long until a quorum of nodes votes again, by the
	// quarantines known when it was explained; 0 if one may vote now.
	// Only Coordinator.Explain sets it.
	VotesAgainIn time.Duration

	nodes   map[int]bool // the nodes of the *NodeErrors counted
	noVotes int          // those that cannot have applied the request as a vote
}

// Explain counts the *NodeErrors joined in err, one per node.
func Explain(err error) Unavailable {
	u := Unavailable{Refused: map[string]int{}, nodes: map[int]bool{}}
	var walk func(error)
	walk = func(err error) {
		var ne *NodeError
		switch e := err.(type) {
		case nil:
		case *NodeError:
			ne = e
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
		if ne == nil || u.nodes[ne.Node] {
			return
		}
		u.nodes[ne.Node] = true
		switch code := errCode(ne.Err); {
		case errors.Is(ne.Err, ErrSameServer):
			u.Aliased++
			u.noVotes++
		case errors.Is(ne.Err, errQuarantined):
			u.Quarantined++
			u.noVotes++
		case code != "":
			u.Refused[code]++
			u.noVotes++ // refused before any write (lock scripts check first)
		case isTimeout(ne.Err), errors.Is(ne.Err, context.Canceled):
			u.Silent++ // the caller gave up before it answered: it may have applied it
		default:
			u.Unreachable++
			if notSent(ne.Err) {
				u.noVotes++
			}
		}
	}
	walk(err)
	return u
}

// Explain is the package's Explain of an error of c's, completed with what c
// knows now: the nodes that do not vote although err does not name them (a
// round is decided without awaiting them), whether the request can have
// taken effect on a quorum, and when a quorum votes again (the quorum-th
// smallest wait of a node, 0 for one that votes now or may at any time).
func (c *Coordinator) Explain(err error) Unavailable {
	u := Explain(err)
	now := time.Now()
	noVotes := u.noVotes
	again := make([]time.Duration, len(c.nodes))
	for i, n := range c.nodes {
		again[i] = n.votesAgainIn(now)
		switch {
		case u.nodes[i] || !n.quarantined(now):
		case n.aliasOf.Load() != nil:
			u.Aliased++
			noVotes++
		default:
			u.Quarantined++
			noVotes++
		}
	}
	slices.Sort(again)
	u.VotesAgainIn = again[c.quorum-1]
	u.NotGranted = len(c.nodes)-noVotes < c.quorum
	return u
}

// notSent reports whether a node's error came before its command was sent:
// no connection could be made.
func notSent(err error) bool {
	var op *net.OpError
	return (errors.As(err, &op) && op.Op == "dial") || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
}

// Describe says what happened to a round of nodes with this quorum, in one
// line for people, e.g. "3 of 5 nodes refused (READONLY ×3), 0 did not
// answer in time; quorum is 3". It names no address and no token.
func (u Unavailable) Describe(nodes, quorum int) string {
	refused, codes := 0, slices.Sorted(maps.Keys(u.Refused))
	for i, code := range codes {
		refused += u.Refused[code]
		codes[i] = fmt.Sprintf("%s ×%d", code, u.Refused[code])
	}
	s := fmt.Sprintf("%d of %d nodes refused", refused, nodes)
	if refused > 0 {
		s += " (" + strings.Join(codes, ", ") + ")"
	}
	s += fmt.Sprintf(", %d did not answer in time", u.Silent)
	if u.Unreachable > 0 {
		s += fmt.Sprintf(", %d could not be reached", u.Unreachable)
	}
	if u.Quarantined > 0 {
		s += fmt.Sprintf(", %d in quarantine (not voting yet)", u.Quarantined)
	}
	if u.Aliased > 0 {
		s += fmt.Sprintf(", %d the same server as another node (never voting)", u.Aliased)
	}
	return s + fmt.Sprintf("; quorum is %d", quorum)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
