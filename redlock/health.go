package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node health.
//
// Each node has a health loop, started by New and stopped by Close: every
// Options.HealthInterval (first at once) it sends PING, INFO server, INFO
// replication, INFO memory (and persistence), GET and SET <KeyPrefix>health
// in one pipelined round trip bounded by the node timeout, on a connection
// of its own. A new connection costs round trips before the check's (HELLO,
// the quarantine's INFO), bounded apart: otherwise a node whose round trip
// is over a half or a third of the node timeout would fail every check made
// on a new connection, and a check that fails drops its connection, so it
// would never be seen up again; and on the client's pool the batched
// fan-out often holds the one connection set up, as it does while a slow
// node's answers are awaited.
//
// A node is up only if all of them succeeded: one that answers PING but
// refuses writes (READONLY, OOM, MISCONF, LOADING, BUSY, or a write that
// hangs under CLIENT PAUSE WRITE) is down, as every acquire on it
// would fail. A replica is down even if it accepts writes: its data is its
// master's. So is a server in cluster mode, which refuses every script of a
// lock. A node that may lose keys unseen (INFO memory, and INFO persistence
// with quarantine off) is logged, not down: see noteSettings.
//
// The uptime feeds the restart quarantine through the same code as the check
// on every new connection (node.noteInfo). That check stays the primary
// defence, as it runs before a connection's first command; the loop catches
// a restart behind a proxy that keeps the connection open, and keeps Status
// current while no request is made.
//
// Between two checks the answers to requests update the state too, but only
// a check is known to include a write (an inspect succeeds on a replica, a
// refused acquire writes nothing). So a failed command or check shows the
// node down at once, "refusing" if it answered with an error reply or a
// check's write hung while its reads answered; an answered command shows a
// node up again only if it was down for no answer; a refusing node stays
// down, without flapping, until a check's write succeeds.
//
// A node seen as a replica (role:slave, or a READONLY answer) does not vote
// until a check sees it as a master again, and is then quarantined for max
// TTL like a restarted node: a replica discards its data when it syncs, so
// it may have lost lock keys. So is a node whose master_replid changed with
// no restart in between (demoted and promoted between two checks), in
// either quarantine mode, durable or not (a replica never had its master's
// last writes). With QuarantineOff neither applies.

// health is what is known of a node's health. It is never changed after it
// is stored: a new observation stores a new value.
type health struct {
	up bool
	// refused: down although it answers (an error reply, or writes that
	// hang while reads do not). Only a check clears it.
	refused bool
	latency time.Duration // round trip of the last check
	err     string        // short description of the last error; "" when up
	uptime  time.Duration // uptime_in_seconds at the last check; 0 if unknown
	at      time.Time     // when it was observed
}

// Status reports each node's health as last seen by its health loop or, in
// between, by the answers to requests (see the package comment);
// QuarantinedUntil is read at the call. Right after New it waits for the
// loops' first checks (at most a few node timeouts), or until ctx ends.
func (c *Coordinator) Status(ctx context.Context) []NodeStatus {
	for _, n := range c.nodes {
		select {
		case <-n.firstDone:
		case <-ctx.Done():
		}
	}
	now := time.Now()
	out := make([]NodeStatus, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = NodeStatus{Addr: n.addr, QuarantinedUntil: n.quarantineEnd(now), Quarantine: n.quarantineWhy(now)}
		if h := n.health.Load(); h != nil {
			out[i].Up, out[i].Latency, out[i].Err = h.up, h.latency, h.err
			out[i].Slow = h.up && h.latency >= n.opts.NodeTimeout/2
			out[i].Uptime, out[i].Checked = h.uptime, h.at
		} else {
			out[i].Err = "not checked yet" // ctx ended before the first check
		}
		if o := n.aliasOf.Load(); o != nil {
			out[i].Up, out[i].Slow = false, false
			out[i].Err = fmt.Sprintf("same Redis server as node %d (%s): never votes; give each server once", o.idx, o.addr)
		}
	}
	return out
}

// startHealth starts the node's health loop.
func (n *node) startHealth() {
	ctx, cancel := context.WithCancel(context.Background())
	n.stopLoop = cancel
	n.loopDone = make(chan struct{})
	n.firstDone = make(chan struct{})
	go n.healthLoop(ctx)
}

// stopHealth stops the health loop, if started, and waits until it returned.
func (n *node) stopHealth() {
	if n.stopLoop == nil {
		return
	}
	n.stopLoop()
	<-n.loopDone
}

func (n *node) healthLoop(ctx context.Context) {
	defer close(n.loopDone)
	defer func() {
		if n.hc != nil {
			n.hc.Close()
		}
	}()
	t := time.NewTicker(n.opts.HealthInterval)
	defer t.Stop()
	for first := true; ; first = false {
		n.check(ctx)
		if first {
			close(n.firstDone)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// healthKeyTTL is how long the key written by a health check lives.
const healthKeyTTL = 5 * time.Second

// setupRounds bounds the setup of the health loop's connection, in node
// timeouts: HELLO, the quarantine's INFO server and a PING each take a round
// trip (the dial is bounded by the node timeout of its own).
const setupRounds = 3

// healthConn returns the health loop's connection, set up if new: nil and
// the error if that failed.
func (n *node) healthConn(ctx context.Context) (*redis.Conn, error) {
	if n.hc != nil {
		return n.hc, nil
	}
	cn := n.client.Conn()
	sctx, cancel := context.WithTimeout(ctx, setupRounds*n.opts.NodeTimeout)
	defer cancel()
	if err := cn.Ping(sctx).Err(); err != nil {
		cn.Close()
		return nil, err
	}
	n.hc = cn
	return cn, nil
}

// check runs one health check and records the outcome (nothing when ctx
// ended first). The write comes last: under CLIENT PAUSE WRITE it blocks,
// and the commands before it still answer. With quarantine on or auto, a node whose
// INFO server fails is down: no new connection to it could vote anyway.
func (n *node) check(ctx context.Context) {
	cn, err := n.healthConn(ctx)
	if err != nil {
		if ctx.Err() == nil {
			n.health.Store(&health{err: n.describe(err), refused: errCode(err) != "", at: time.Now()})
		}
		return
	}
	cctx, cancel := context.WithTimeout(ctx, n.opts.NodeTimeout)
	defer cancel()
	start := time.Now()
	pipe := cn.Pipeline()
	ping := pipe.Ping(cctx)
	info := pipe.Info(cctx, "server")
	cfg := n.queueConfig(cctx, pipe) // refused: not durable, but not down
	// Read for the warnings of noteSettings only: their errors say nothing of the node.
	settings := []*redis.StringCmd{pipe.Info(cctx, "memory")}
	if n.opts.Quarantine == QuarantineOff {
		settings = append(settings, pipe.Info(cctx, "persistence"))
	}
	repl := pipe.Info(cctx, "replication") // two commands: Redis 6 takes one section
	mark := pipe.Get(cctx, n.healthKey)
	set := pipe.Set(cctx, n.healthKey, n.mark, healthKeyTTL)
	_, execErr := pipe.Exec(cctx)
	if errors.Is(execErr, redis.Nil) {
		execErr = nil // no coordinator wrote the health key within its TTL
	}
	n.noteMark(mark.Val())
	at := time.Now()
	if execErr != nil && errCode(execErr) == "" {
		n.hc.Close() // broken or timed out: the next check sets up another
		n.hc = nil
	}
	if ctx.Err() != nil {
		return // stopped, or the caller gave up: says nothing about the node
	}
	h := &health{latency: at.Sub(start), at: at}
	pingErr, infoErr, replErr := ping.Err(), info.Err(), repl.Err()
	if execErr != nil && errCode(execErr) == "" {
		// A failed connection fails every command of the pipeline, also
		// those answered before: their replies tell.
		if ping.Val() == "PONG" {
			pingErr = nil
		}
		if info.Val() != "" {
			infoErr = nil
		}
		if repl.Val() != "" {
			replErr = nil
		}
	}
	err = pingErr
	settingsErr := slices.ContainsFunc(settings, func(c *redis.StringCmd) bool { return c.Err() != nil })
	if err == nil && infoErr == nil && replErr == nil && !settingsErr && !cfg.failed() && set.Err() == nil {
		err = execErr // the connection failed before any command (e.g. AUTH)
	}
	if err == nil && infoErr == nil {
		h.uptime, _ = uptime(info.Val())
		infoErr = n.noteInfo(info.Val(), cfg.durability(), at)
	}
	if err == nil && infoErr != nil && n.opts.Quarantine != QuarantineOff {
		err = fmt.Errorf("INFO server: %w", infoErr)
	}
	var desc string
	if err == nil && replErr == nil {
		if role := n.noteRole(repl.Val(), infoField(info.Val(), "run_id"), at); role == "slave" {
			desc = errReplica
			if errCode(set.Err()) != "READONLY" {
				desc = "replica (of " + infoField(repl.Val(), "master_host") + ":" + infoField(repl.Val(), "master_port") +
					"): its data is its master's"
			}
			err = errors.New(desc)
		}
	}
	if err == nil && infoField(info.Val(), "redis_mode") == "cluster" {
		desc = errCluster
		err = errors.New(desc)
	}
	for _, c := range settings {
		if c.Err() == nil {
			n.noteSettings(c.Val())
		}
	}
	if err == nil && set.Err() != nil {
		err = set.Err()
		if isTimeout(err) {
			desc = fmt.Sprintf("writes get no answer within the node timeout (%v), reads do (CLIENT PAUSE WRITE?)", n.opts.NodeTimeout)
		}
	}
	h.up = err == nil
	// Down for no answer at all (PING got no reply), or refusing.
	h.refused = err != nil && (pingErr == nil || errCode(pingErr) != "")
	if desc == "" {
		desc = n.describe(err)
	}
	h.err = desc
	n.health.Store(h)
}

// noteMark logs, once per value, a health key written by a coordinator of
// the same key prefix given another number of nodes: its quorum is not this
// one's, so the two can grant the same lock to two clients at once. A
// coordinator given the same number of other nodes goes unseen.
func (n *node) noteMark(v string) {
	if !strings.HasPrefix(v, "n=") || v == n.mark || v == n.otherMark {
		return
	}
	n.otherMark = v
	n.opts.Logger.Error().Str("node", n.addr).Str("mine", n.mark).Str("other", v).
		Msg("redlock: another gateway on this node and key prefix was given another number of nodes: " +
			"the two do not exclude each other; give every gateway the same nodes")
}

// errReplica is how Status describes a read-only replica.
const errReplica = "READONLY: replica, refuses writes"

// errCluster is how Status describes a server in cluster mode: the keys of
// a lock's scripts hash to different slots, so it refuses them (CROSSSLOT).
const errCluster = "cluster mode: refuses every lock (CROSSSLOT); give independent non-cluster masters"

// noteSettings warns, whenever it changes, of a setting read from an INFO
// memory or persistence reply that can lose lock keys unseen: a maxmemory
// with a maxmemory-policy other than noeviction (evictions), or, with the
// restart quarantine off, no append-only file (a restart empties the node,
// which then votes at once). Either breaks mutual exclusion; the node still
// votes. Only the health loop calls it.
func (n *node) noteSettings(info string) {
	if policy, ok := infoValue(info, "maxmemory_policy"); ok {
		if maxmem := infoField(info, "maxmemory"); maxmem == "" || maxmem == "0" || policy == "noeviction" {
			policy = ""
		}
		if policy != n.evicting && policy != "" {
			n.opts.Logger.Warn().Str("node", n.addr).Str("maxmemory_policy", policy).
				Msg("redlock: node may evict lock keys at its maxmemory, which breaks mutual exclusion: set maxmemory-policy noeviction")
		}
		n.evicting = policy
	}
	if aof, ok := infoValue(info, "aof_enabled"); ok {
		if aof == "0" && !n.noAOF {
			n.opts.Logger.Warn().Str("node", n.addr).
				Msg("redlock: node has no append-only file and the restart quarantine is off: a restart empties it and it votes at once, which breaks mutual exclusion")
		}
		n.noAOF = aof == "0"
	}
}

// noteRole reads the node's role ("master", "slave" or "") from an INFO
// replication reply of the server process runID received at at, and
// quarantines a replica made master again (see the package comment). Only
// the health loop calls it.
func (n *node) noteRole(repl, runID string, at time.Time) string {
	role := infoField(repl, "role")
	replID := infoField(repl, "master_replid")
	switched := runID != "" && runID == n.lastRunID && replID != "" && n.lastReplID != "" && replID != n.lastReplID
	n.lastRunID, n.lastReplID = runID, replID
	switch role {
	case "slave":
		n.markReplica()
	case "master":
		if n.replica.Swap(false) || switched {
			n.promoted(at)
		}
	}
	return role
}

// markReplica records that the node was seen as a replica, and logs it the
// first time.
func (n *node) markReplica() {
	if !n.replica.Swap(true) {
		n.opts.Logger.Warn().Str("node", n.addr).
			Msg("redlock: node is a replica: it refuses writes, and is quarantined for max TTL once it is a master again")
	}
}

// promoted quarantines a replica made master again, seen at at, for max TTL.
func (n *node) promoted(at time.Time) {
	if n.opts.Quarantine == QuarantineOff {
		n.opts.Logger.Warn().Str("node", n.addr).
			Msg("redlock: node was a replica and is a master again: it may have lost lock keys; quarantine is off, it votes at once")
		return
	}
	n.replUntil.Store(max(n.replUntil.Load(), mono(at)+int64(n.opts.MaxTTL))) // only the health loop writes it
	n.opts.Logger.Warn().Str("node", n.addr).Time("quarantined_until", at.Add(n.opts.MaxTTL)).
		Msg("redlock: node was a replica and is a master again: it may have lost lock keys; it does not vote for max TTL")
}
