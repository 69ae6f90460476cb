// Package redlock implements the Redlock distributed lock algorithm over N
// independent Redis masters. It knows nothing of HTTP; the redlockd gateway
// is one user of it.
//
// # Algorithm
//
// Acquire generates one random token per lock (16 bytes from crypto/rand,
// URL-safe base64) or takes the caller's, and runs a Lua script doing
// SET key token NX PX ttl on every node in parallel, each command bounded by
// the node timeout. A round is decided as soon as the answers so far settle
// it (a quorum granted, or too many refused or failed for one): a slow or
// silent minority is not awaited. Elapsed time is measured on the monotonic
// clock from before the first send to that decision; validity = ttl -
// elapsed - (ttl*DriftFactor + 2ms). The lock is acquired iff a quorum
// (N/2+1) of nodes set it and validity > 0. Otherwise the lock is released
// on the nodes that granted in time at once, and in the background on the
// others, including those that did not answer (their SET may have landed),
// and the attempt is repeated after a jittered delay while the caller's wait
// lasts.
//
// Release is compare-and-delete and Extend compare-and-pexpire, both Lua
// scripts run on every node. Extend succeeds iff a quorum extended within the
// new validity window; it also puts the lock back on nodes where it vanished
// (a restarted node) while the quorum still holds it, and never resurrects a
// lock already lost on a quorum. All scripts are run by SHA (EVALSHA with an
// EVAL fallback on NOSCRIPT).
//
// # Fencing tokens
//
// Every node keeps a counter per resource. The acquire script increments it
// on every node that grants the lock; the coordinator takes the maximum over
// the granting quorum and writes it back (as a maximum) to every node that
// answered before returning (unless every one of them granted anew with the
// same value and the token is not the caller's: a quorum's counters hold it
// already). Any two quorums intersect, so the next acquire
// reads a counter at least as high: fences are strictly increasing per
// resource, also when any single node restarts empty between two
// acquisitions (the write-back reached all other nodes). They can go
// backwards only if the nodes holding the highest value lose it on a
// majority, or a node missed the write-back and another node restarts empty.
//
// # Read-write locks
//
// AcquireOptions.Mode ModeRead takes a shared lock: each node keeps its
// readers in a sorted set beside the lock key (token → expiry on the node's
// clock) and refuses a reader while a writer holds the lock key, a writer
// while a live reader is there, so readers and writers conflict pairwise as
// writers do. A waiting writer keeps new readers out (the wwait key, and the
// gateway's queue). A reader's fence is the last writer's (the greatest
// counter of its quorum, written back when the nodes differ). Extend,
// Release and Inspect find whether a token is the writer or a reader. See
// docs/read-write-locks.md.
//
// # Locks on several resources
//
// AcquireMulti takes a writer's lock on several resources, all or none:
// each node runs one script that takes every resource if all are free (or
// held by the token), else none, so no client holds some while waiting for
// others (no deadlock). Each resource gets its own fence, by its own rules.
// ExtendMulti and ReleaseMulti run the lock's rounds on every resource at
// once. See docs/several-resources.md.
//
// # Restart quarantine
//
// A node whose uptime is below MaxTTL may have lost lock keys in a crash.
// Every new connection first reads INFO server (and, with QuarantineAuto,
// the default, CONFIG GET appendonly and appendfsync) in one round trip;
// such a node does not count toward an acquire or extend quorum until it has
// been up for MaxTTL, though releases still reach it, unless (auto) it and
// the process before it keep every acknowledged write (appendonly yes,
// appendfsync always): it lost nothing. QuarantineOn quarantines every
// restarted node. A restarted Redis drops all connections, so the restart is
// seen before the node's first vote.
//
// # Node identity
//
// A node is its server's run_id, read on the same connection check: two
// nodes that reach one server (two URLs of it) would be two votes of it, so
// the later found never votes (see identity.go and CheckIdentities).
//
// # Errors
//
// Callers use errors.Is: ErrLockHeld (as *HeldError with the holder's
// remaining TTL), ErrNotOwner (as ErrLockExpired or ErrHeldByOther),
// ErrQuorumUnavailable (joined with one *NodeError per node that did not
// vote; Coordinator.Explain tells whether it can have taken effect and when
// a quorum votes again), ErrSameServer,
// ErrNotHeld and ErrInvalid. A cancelled wait returns the last attempt's
// error joined with ctx.Err().
package redlock
