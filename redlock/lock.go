package redlock

import "time"

// Lock is a lock acquired or extended on a quorum of nodes. It is a value:
// nothing changes it after it is returned.
type Lock struct {
	// Namespace and Resource name the lock.
	Namespace string
	Resource  string
	// Token is the lock's identity: whoever knows it may extend or release.
	Token string
	// Fence is the fencing token: strictly greater than every fence handed
	// out before for the same namespace and resource.
	Fence int64
	// Owner is the free text given at acquire time.
	Owner string
	// TTL is the TTL the keys were set with.
	TTL time.Duration
	// Validity is TTL minus elapsed time minus clock drift: how long the lock
	// is safely held, measured from Start.
	Validity time.Duration
	// Start is the (monotonic) instant taken before the first command was sent.
	Start time.Time
	// Until is Start + Validity: the end of the safe window.
	Until time.Time
	// Nodes is the number of nodes, Quorum the number needed, Locked the
	// number of nodes that hold the lock.
	Nodes, Quorum, Locked int
}

// Info is what Inspect tells about a held lock. It never includes the token.
type Info struct {
	Namespace string
	Resource  string
	Owner     string
	Fence     int64
	// Remaining is the smallest remaining TTL among the quorum of nodes that
	// hold the lock with the same token.
	Remaining time.Duration
	// HeldNodes is the number of nodes holding that token.
	HeldNodes int
}

// NodeStatus is the health of one node as seen by Status.
type NodeStatus struct {
	// Addr is host:port, never with credentials.
	Addr    string
	Up      bool
	Latency time.Duration
	// QuarantinedUntil is non-zero while the node does not vote (restart
	// quarantine, or that of a replica made master again).
	QuarantinedUntil time.Time
	// Err is a short description of the last error when not up, e.g.
	// "READONLY: replica, refuses writes".
	Err string
	// Uptime is the server's uptime_in_seconds at the last health check; 0
	// if unknown.
	Uptime time.Duration
	// Checked is when the state was last observed, by the health loop or by
	// a request's answer; zero if never.
	Checked time.Time
}
