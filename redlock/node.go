package redlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// node is one Redis master.
type node struct {
	idx    int
	addr   string // host:port, never credentials
	client *redis.Client
	pipe   *redis.AutoPipeliner // the batched fan-out (see batch.go); nil with Options.NoBatching
	opts   Options              // the coordinator's, defaults filled in
	// until is the end of the restart quarantine (mono; 0 if none): the
	// latest end in incarnations, written under qmu.
	until atomic.Int64
	qmu   sync.Mutex
	// incarnations maps the run_id of each server process recently seen on
	// this address to the end of its quarantine (mono).
	incarnations map[string]int64
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

// base anchors mono, a monotonic timestamp.
var base = time.Now()

func mono(t time.Time) int64 { return int64(t.Sub(base)) }

// newNode makes the client of one node. Every command, dial and wait for a
// pooled connection is bounded by the node timeout, and never retried. With
// quarantine on, every new connection first reads the server's uptime: a
// restarted Redis drops every connection, so the restart is seen before the
// node's first vote after it.
func newNode(idx int, o *redis.Options, opts Options) (*node, error) {
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
	n := &node{idx: idx, addr: opt.Addr, opts: opts, healthKey: opts.KeyPrefix + "health"}
	if !opts.NoQuarantine {
		userHook := opt.OnConnect
		opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
			if userHook != nil {
				if err := userHook(ctx, cn); err != nil {
					return err
				}
			}
			return n.checkUptime(ctx, cn)
		}
	}
	n.client = redis.NewClient(&opt)
	if !opts.NoBatching {
		n.client.AddHook(arrivals{})
	}
	if opts.ClientHook != nil {
		opts.ClientHook(n.client) // after arrivals: its hooks see the caller's context
	}
	if !opts.NoBatching {
		ap, err := n.client.AsyncAutoPipelineWithOptions(&redis.AutoPipelineOptions{MaxQueuedCommands: maxQueued})
		if err != nil {
			n.client.Close()
			return nil, err
		}
		n.pipe = ap
	}
	return n, nil
}

// checkUptime quarantines the node if the server of a new connection
// restarted recently.
func (n *node) checkUptime(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	return n.noteInfo(info, time.Now())
}

// noteInfo quarantines the node until its server has been up for max TTL (it
// may have lost lock keys in its restart), from an INFO server reply received
// at at: the connection check and the health loop both come here.
//
// uptime_in_seconds is floor(now) - floor(start), up to 1s more than the real
// uptime, so a second less is counted: each reply gives an end no earlier
// than start + maxTTL. Replies of one process (run_id) narrow its end to the
// earliest; the node is quarantined until the latest end of all processes,
// so replies handled out of order never shorten a newer process's.
func (n *node) noteInfo(info string, at time.Time) error {
	up, err := uptime(info)
	if err != nil {
		return err
	}
	id := infoField(info, "run_id")
	up = max(0, up-time.Second)
	now := mono(at)
	end := now + int64(n.opts.MaxTTL-up)

	n.qmu.Lock()
	defer n.qmu.Unlock()
	if n.incarnations == nil {
		n.incarnations = map[string]int64{}
	}
	old, seen := n.incarnations[id]
	switch {
	case !seen:
		n.incarnations[id] = end // if up long enough, remembered as cleared
		if end > now {
			n.opts.Logger.Warn().Str("node", n.addr).Dur("uptime", up).Time("quarantined_until", at.Add(time.Duration(end-now))).
				Msg("redlock: node restarted recently; it does not vote until it has been up for max TTL")
		}
	case id != "" && end < old:
		n.incarnations[id] = end // a tighter bound for the same process
	case id == "" && end > old:
		n.incarnations[id] = end // no run_id: processes cannot be told apart, never shorten
	}
	var until int64
	for _, e := range n.incarnations {
		until = max(until, e)
	}
	// Processes whose quarantine is over stay known (an uptime reply read
	// again after a reconnect could otherwise quarantine them anew, being
	// up to 1s coarse); only the most recent few are kept.
	for len(n.incarnations) > maxIncarnations {
		oldest := ""
		for k, e := range n.incarnations {
			if oldest == "" || e < n.incarnations[oldest] {
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
// quarantine on).
func (n *node) quarantined(t time.Time) bool {
	m := mono(t)
	return m < n.until.Load() || m < n.replUntil.Load() || (n.replica.Load() && !n.opts.NoQuarantine)
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

// fail wraps err as this node's *NodeError.
func (n *node) fail(err error) error { return &NodeError{Node: n.idx, Addr: n.addr, Err: err} }
