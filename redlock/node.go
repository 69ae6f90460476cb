package redlock

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// PipelineConns is the size of each node's pipeline pool (see newNode):
// the automatic pipeline runs one batch at a time.
const PipelineConns = 1

// node is one Redis master.
type node struct {
	idx    int
	addr   string // host:port, never credentials
	client *redis.Client
	pipe   *redis.AutoPipeliner // the batched fan-out (see batch.go); nil with Options.NoBatching
	// sent are the round commands sent through pipe and not yet awaited,
	// in the order sent (see send and await); sendMu orders the sends and
	// guards closed, set once sent is closed.
	sent   chan *roundCmd
	sendMu sync.Mutex
	closed bool
	opts   Options     // the coordinator's, defaults filled in
	ids    *identities // the coordinator's: which node reaches which server
	// aliasOf is the node that reaches the same server as this one, found
	// first: this node never votes (see identity.go). Nil if none.
	aliasOf atomic.Pointer[node]
	// until is the end of the restart quarantine (mono; 0 if none): the
	// latest end in incarnations, written under qmu.
	until atomic.Int64
	qmu   sync.Mutex
	// incarnations maps the run_id of each server process recently seen on
	// this address to what is known of it.
	incarnations map[string]*incarnation
	replica      atomic.Bool  // seen as a replica now (see noteRole): it does not vote
	replUntil    atomic.Int64 // end of the quarantine of a replica made master again (mono)

	health    atomic.Pointer[health] // the latest observation; nil before the first
	stopLoop  context.CancelFunc     // stops the health loop
	loopDone  chan struct{}          // closed when the health loop returned
	firstDone chan struct{}          // closed when the loop's first check is over
	healthKey string                 // <KeyPrefix>health, shared by every gateway of the prefix
	// mark is the value of the health key, "n=<N>": a coordinator that
	// reads another there was given another number of nodes (see check).
	mark string
	// otherMark is the last other mark read and logged (the health loop's only).
	otherMark string
	hc        *redis.Conn // the health loop's connection; nil until set up
	// lastRunID and lastReplID are the run_id and master_replid of the last
	// health check (the health loop's only).
	lastRunID, lastReplID string
	// evicting is the maxmemory-policy of a node that may evict, and noAOF
	// whether it has no append-only file, at the last check (the health loop's only).
	evicting string
	noAOF    bool
}

// incarnation is what a node knows of one server process (run_id).
type incarnation struct {
	end     int64      // end of its quarantine (mono); not after now if it votes at once
	start   int64      // when it started (mono), from its first reply's uptime
	durable durability // its configuration at its last reply read
	// why says why it was quarantined at its start ("" if it was not: it
	// kept every acknowledged write).
	why string
}

// base anchors mono, a monotonic timestamp.
var base = time.Now()

func mono(t time.Time) int64 { return int64(t.Sub(base)) }

// newNode makes the client of one node. Every command, dial and wait for a
// pooled connection is bounded by the node timeout, and never retried.
// Every new connection first reads INFO server (and, with QuarantineAuto,
// the node's persistence settings): the server's run_id tells whether
// another node reaches the same server, and its uptime whether it
// restarted; a restarted Redis drops every connection, so the restart is
// seen before the node's first vote after it.
func newNode(idx int, o *redis.Options, opts Options, ids *identities) (*node, error) {
	opt := *o
	timeout := opts.NodeTimeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.DialTimeout = timeout
	opt.ReadTimeout = timeout
	opt.WriteTimeout = timeout
	opt.PoolTimeout = timeout
	// Maintenance notifications are Redis Enterprise's, for moving shards.
	// go-redis's default (auto) asks every new connection for them until a
	// node refuses (Redis does): a round trip more per connection, and a
	// change of opt that races with the connections being set up.
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// RESP2: the coordinator uses nothing of RESP3 (push notifications for
	// client-side caching or maintenance, RESP3 types in script replies;
	// pub/sub has a connection of its own in either), and with RESP3 go-redis
	// looks for push notifications before every reply it reads.
	opt.Protocol = 2
	// The automatic pipeline runs one batch at a time (batch.go), on one
	// connection of the pipeline pool: a pool of one, which a rare second
	// pipeline spills over from to the main pool. The main pool serves the
	// rest (scripts loading, the census, lists, and every command with
	// NoBatching), at go-redis's size; connections are dialed on first use
	// (Warm dials them before serving) and kept while used.
	opt.PipelinePoolSize = PipelineConns
	n := &node{idx: idx, addr: opt.Addr, opts: opts, ids: ids, healthKey: opts.KeyPrefix + "health"}
	userHook := opt.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if userHook != nil {
			if err := userHook(ctx, cn); err != nil {
				return err
			}
		}
		return n.checkServer(ctx, cn)
	}
	n.client = redis.NewClient(&opt)
	if opts.ClientHook != nil {
		if !opts.NoBatching {
			n.client.AddHook(callers{})
		}
		opts.ClientHook(n.client) // after callers: its hooks see the caller's context
	}
	if !opts.NoBatching {
		ap, err := n.client.AsyncAutoPipelineWithOptions(&redis.AutoPipelineOptions{MaxQueuedCommands: maxQueued})
		if err != nil {
			n.client.Close()
			return nil, err
		}
		n.pipe = ap
		// Queued (at most maxQueued) and in flight (one batch, at most as
		// many): send never waits for await.
		n.sent = make(chan *roundCmd, 2*maxQueued+1)
		go n.await()
	}
	return n, nil
}

// close closes the node's client, and with it its automatic pipeline, whose
// commands all get their answer (or an error); await returns once it has
// told their rounds.
func (n *node) close() error {
	err := n.client.Close()
	if n.sent != nil {
		n.sendMu.Lock()
		n.closed = true
		close(n.sent)
		n.sendMu.Unlock()
	}
	return err
}

// checkServer reads INFO server (and the persistence settings) on a new
// connection, in one round trip, and notes them (see noteInfo). With
// quarantine off a server that refuses INFO server (the embedded dev nodes)
// is let through: only its identity goes unchecked.
func (n *node) checkServer(ctx context.Context, cn *redis.Conn) error {
	var info *redis.StringCmd
	var cfg configCmds
	_, _ = cn.Pipelined(ctx, func(p redis.Pipeliner) error {
		info = p.Info(ctx, "server")
		cfg = n.queueConfig(ctx, p)
		return nil
	})
	if err := info.Err(); err != nil {
		if n.opts.Quarantine == QuarantineOff && errCode(err) != "" {
			return nil
		}
		return err
	}
	return n.noteInfo(info.Val(), cfg.durability(), time.Now())
}

// noteInfo notes the server's identity (run_id: see identity.go) and
// quarantines the node until its server has been up for max TTL (it may
// have lost lock keys in its restart), from an INFO server reply received
// at at and the persistence settings d read with it: the connection check
// and the health loop both come here. With QuarantineAuto a new process
// that keeps every acknowledged write (d.durable()), after one that did too
// as last seen, votes at once.
//
// uptime_in_seconds is floor(now) - floor(start), up to 1s more than the real
// uptime, so a second less is counted: each reply gives an end no earlier
// than start + maxTTL. Replies of one process (run_id) narrow its end to the
// earliest; the node is quarantined until the latest end of all processes,
// so replies handled out of order never shorten a newer process's.
func (n *node) noteInfo(info string, d durability, at time.Time) error {
	up, err := uptime(info)
	if err != nil {
		return err
	}
	id := infoField(info, "run_id")
	n.ids.note(n, id)
	if n.opts.Quarantine == QuarantineOff {
		return nil
	}
	up = max(0, up-time.Second)
	now := mono(at)
	end := now + int64(n.opts.MaxTTL-up)

	n.qmu.Lock()
	defer n.qmu.Unlock()
	if n.incarnations == nil {
		n.incarnations = map[string]*incarnation{}
	}
	inc, seen := n.incarnations[id]
	switch {
	case !seen:
		inc = &incarnation{end: end, start: now - int64(up), durable: d}
		inc.why = n.restartCause(id, d)
		if inc.why == "" {
			inc.end = min(end, now) // it kept every acknowledged write: it votes at once
		}
		n.incarnations[id] = inc // if up long enough, remembered as cleared
		if inc.end > now {
			n.opts.Logger.Warn().Str("node", n.addr).Dur("uptime", up).Str("reason", inc.why).
				Time("quarantined_until", at.Add(time.Duration(inc.end-now))).
				Msg("redlock: node restarted recently; it does not vote until it has been up for max TTL")
		} else if up < n.opts.MaxTTL {
			n.opts.Logger.Info().Str("node", n.addr).Dur("uptime", up).Str("persistence", d.String()).
				Msg("redlock: node restarted recently and keeps every acknowledged write: it votes at once")
		}
	case id != "" && end < inc.end:
		inc.end = end // a tighter bound for the same process
	case id == "" && end > inc.end:
		inc.end = end // no run_id: processes cannot be told apart, never shorten
	}
	if seen && d.known {
		inc.durable = d // the latest read: a change at runtime counts at the next restart
	}
	var until int64
	for _, e := range n.incarnations {
		until = max(until, e.end)
	}
	// Processes whose quarantine is over stay known (an uptime reply read
	// again after a reconnect could otherwise quarantine them anew, being
	// up to 1s coarse); only the most recent few are kept.
	for len(n.incarnations) > maxIncarnations {
		oldest := ""
		for k, e := range n.incarnations {
			if oldest == "" || e.end < n.incarnations[oldest].end {
				oldest = k
			}
		}
		delete(n.incarnations, oldest)
	}
	if until <= now {
		until = 0
	}
	n.until.Store(until)
	return nil
}

// restartCause says why a server process (run_id id) seen for the first
// time, with persistence settings d, must not vote until it has been up for
// max TTL; "" if it may vote at once: with QuarantineAuto, when it and the
// process before it (the latest started, as last seen) keep every
// acknowledged write. The process before must have: one that lost writes in
// its crash leaves them lost whatever the new one's settings. Called under
// qmu.
func (n *node) restartCause(id string, d durability) string {
	if n.opts.Quarantine == QuarantineOn {
		return "quarantine on"
	}
	if id == "" {
		return "no run_id: restarts cannot be told apart"
	}
	if !d.durable() {
		return "not durable (" + d.String() + ")"
	}
	var prev *incarnation
	for _, e := range n.incarnations {
		if prev == nil || e.start > prev.start {
			prev = e
		}
	}
	if prev != nil && !prev.durable.durable() {
		return "the process before it was not durable (" + prev.durable.String() + ")"
	}
	return ""
}

const maxIncarnations = 8 // server processes a node remembers

// uptime reads uptime_in_seconds from INFO server.
func uptime(info string) (time.Duration, error) {
	v := infoField(info, "uptime_in_seconds")
	if v == "" {
		return 0, fmt.Errorf("INFO server has no uptime_in_seconds")
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad uptime_in_seconds %q", v)
	}
	return time.Duration(s) * time.Second, nil
}

// quarantined reports whether the node must not vote at t: it restarted
// within max TTL, or it is a replica or was one within max TTL (with
// quarantine on or auto), or it reaches the same server as another node.
func (n *node) quarantined(t time.Time) bool {
	m := mono(t)
	return m < n.until.Load() || m < n.replUntil.Load() ||
		(n.replica.Load() && n.opts.Quarantine != QuarantineOff) || n.aliasOf.Load() != nil
}

// quarantineEnd is the wall-clock end of the restart or replica quarantine,
// zero if none (a node that is a replica now is shown down instead).
func (n *node) quarantineEnd(now time.Time) time.Time {
	u := max(n.until.Load(), n.replUntil.Load())
	if u <= mono(now) {
		return time.Time{}
	}
	return now.Add(time.Duration(u - mono(now)))
}

// votesAgainIn is how long until the node votes again by what is known at
// now: 0 if it votes now or when that is unknown (a replica, a node down),
// never for a node that reaches the same server as another.
func (n *node) votesAgainIn(now time.Time) time.Duration {
	if n.aliasOf.Load() != nil {
		return math.MaxInt64
	}
	if end := n.quarantineEnd(now); !end.IsZero() {
		return end.Sub(now)
	}
	return 0
}

// quarantineWhy says why the node does or does not vote after its latest
// restart, for Status.
func (n *node) quarantineWhy(now time.Time) string {
	maxTTL := n.opts.MaxTTL
	switch {
	case n.opts.Quarantine == QuarantineOff:
		return "quarantine off: votes at once after a restart"
	case n.replica.Load():
		return "replica: does not vote; quarantined for max TTL once a master again"
	case mono(now) < n.replUntil.Load():
		return fmt.Sprintf("was a replica: quarantined for max TTL (%v) since it became a master", maxTTL)
	}
	n.qmu.Lock()
	defer n.qmu.Unlock()
	var cur *incarnation
	for _, e := range n.incarnations {
		if cur == nil || e.start > cur.start {
			cur = e
		}
	}
	if cur == nil {
		return "not checked yet"
	}
	up := time.Duration(mono(now) - cur.start).Round(time.Second)
	switch {
	case mono(now) < cur.end:
		return fmt.Sprintf("restarted %v ago, %s: quarantined for max TTL (%v)", up, cur.why, maxTTL)
	case mono(now) < n.until.Load():
		return fmt.Sprintf("restarted twice within max TTL (%v): quarantined for max TTL after the earlier restart", maxTTL)
	case n.opts.Quarantine == QuarantineOn:
		return fmt.Sprintf("up for max TTL (%v)", maxTTL)
	case cur.durable.durable():
		return "durable: " + cur.durable.String()
	case up < maxTTL:
		return fmt.Sprintf("restarted %v ago durable, not durable now (%s): quarantined after its next restart", up, cur.durable)
	}
	return fmt.Sprintf("up for max TTL (%v); not durable (%s): quarantined after a restart", maxTTL, cur.durable)
}

// fail wraps err as this node's *NodeError.
func (n *node) fail(err error) error { return &NodeError{Node: n.idx, Addr: n.addr, Err: err} }

// infoField reads the value of field from an INFO reply ("" if absent).
func infoField(info, field string) string {
	v, _ := infoValue(info, field)
	return v
}

// infoValue reads the value of field from an INFO reply, and whether the
// reply has it.
func infoValue(info, field string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}
