package redlock

import "time"

// Lock is a lock acquired or extended on a quorum of nodes. It is a value:
// nothing changes it after it is returned.
type Lock struct {
	// Namespace and Resource name the lock.
	Namespace string
	Resource  string
	Token     string // whoever knows it may extend or release
	// Fence is the fencing token: a writer's is strictly greater than every
	// fence handed out before for the same namespace and resource; a
	// reader's is the last writer's (at least that of every writer that
	// held the lock before it).
	Fence int64
	Mode  Mode          // ModeWrite or ModeRead
	Owner string        // the free text given at acquire time
	TTL   time.Duration // the TTL the keys were set with
	// Validity is TTL minus elapsed time minus clock drift: how long the lock
	// is safely held, measured from Start.
	Validity time.Duration
	Start    time.Time // the (monotonic) instant before the first command was sent
	Until    time.Time // Start + Validity: the end of the safe window
	// Nodes is the number of nodes, Quorum the number needed, Locked the
	// number of nodes that hold the lock.
	Nodes, Quorum, Locked int
}

// Info is what Inspect tells about a held lock. It never includes the token.
type Info struct {
	Namespace string
	Resource  string
	// Mode is ModeWrite, or ModeRead when readers hold the lock: then Owner,
	// Remaining and HeldNodes are those of the reader that holds it longest,
	// Fence the greatest of the readers' and Readers how many hold it.
	Mode    Mode
	Readers int
	Owner   string
	Fence   int64
	// Remaining is the smallest remaining TTL among the quorum of nodes that
	// hold the lock with the same token.
	Remaining time.Duration
	HeldNodes int // the number of nodes holding that token
}

// NodeStatus is the health of one node as seen by Status.
type NodeStatus struct {
	Addr string // host:port, never with credentials
	Up   bool
	// Slow: up, but the last health check took at least half the node
	// timeout. Requests do not wait for it (a round is decided at the
	// quorum), so only Status shows it.
	Slow    bool
	Latency time.Duration
	// QuarantinedUntil is non-zero while the node does not vote (restart
	// quarantine, or that of a replica made master again).
	QuarantinedUntil time.Time
	// Quarantine says why the node does or does not vote after its latest
	// restart, e.g. "durable: appendonly yes, appendfsync always" or
	// "restarted 12s ago, not durable (appendonly yes, appendfsync
	// everysec): quarantined for max TTL (1m0s)".
	Quarantine string
	// Err is a short description of the last error when not up, e.g.
	// "READONLY: replica, refuses writes".
	Err    string
	Uptime time.Duration // uptime_in_seconds at the last health check; 0 if unknown
	// Checked is when the state was last observed, by the health loop or by
	// a request's answer; zero if never.
	Checked time.Time
}
