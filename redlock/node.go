package redlock

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// node is one Redis master.
type node struct {
	idx    int
	addr   string // host:port, never credentials
	client *redis.Client
	// until is the end of the node's restart quarantine, in nanoseconds of
	// the process's monotonic clock (see mono); 0 when not quarantined.
	until atomic.Int64
}

// base anchors mono: durations since it are monotonic.
var base = time.Now()

// mono is a monotonic timestamp.
func mono(t time.Time) int64 { return int64(t.Sub(base)) }

// newNode makes the client of one node. Every command is bounded by the
// caller's context (the per-node timeout), never retried, and dialling and
// waiting for a pooled connection are bounded by the node timeout too.
// With quarantine on, every new connection first reads the server's uptime,
// before any command runs on it: a restarted Redis drops every connection, so
// the restart is seen before the node's first vote after it.
func newNode(idx int, o *redis.Options, opts Options) *node {
	opt := *o
	timeout := opts.NodeTimeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.DialTimeout = timeout
	opt.ReadTimeout = timeout
	opt.WriteTimeout = timeout
	opt.PoolTimeout = timeout
	n := &node{idx: idx, addr: opt.Addr}
	if !opts.NoQuarantine {
		userHook := opt.OnConnect
		log := opts.Logger
		opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
			if userHook != nil {
				if err := userHook(ctx, cn); err != nil {
					return err
				}
			}
			return n.checkUptime(ctx, cn, opts.MaxTTL, log)
		}
	}
	n.client = redis.NewClient(&opt)
	return n
}

// checkUptime quarantines the node until it has been up for maxTTL: a node
// that restarted within the last maxTTL may have lost lock keys.
func (n *node) checkUptime(ctx context.Context, cn *redis.Conn, maxTTL time.Duration, log *zerolog.Logger) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	up, err := uptime(info)
	if err != nil {
		return err
	}
	// Redis reports floor(now) - floor(start) in whole seconds, which can be
	// up to 1s more than the real uptime: count a second less.
	up = max(0, up-time.Second)
	if up >= maxTTL {
		return nil
	}
	now := time.Now()
	end := mono(now) + int64(maxTTL-up)
	for {
		old := n.until.Load()
		if old >= end || n.until.CompareAndSwap(old, end) {
			break
		}
	}
	log.Warn().Str("node", n.addr).Dur("uptime", up).Time("quarantined_until", now.Add(maxTTL-up)).
		Msg("redlock: node restarted recently; it does not vote until it has been up for max TTL")
	return nil
}

// uptime reads uptime_in_seconds from INFO server.
func uptime(info string) (time.Duration, error) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "uptime_in_seconds:"); ok {
			s, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bad uptime_in_seconds %q", v)
			}
			return time.Duration(s) * time.Second, nil
		}
	}
	return 0, fmt.Errorf("INFO server has no uptime_in_seconds")
}

// quarantined reports whether the node must not vote at t.
func (n *node) quarantined(t time.Time) bool { return mono(t) < n.until.Load() }

// quarantineEnd is the wall-clock end of the quarantine, zero if none.
func (n *node) quarantineEnd(now time.Time) time.Time {
	u := n.until.Load()
	if u <= mono(now) {
		return time.Time{}
	}
	return now.Add(time.Duration(u - mono(now)))
}

// reply is one node's answer in a fan-out.
type reply[T any] struct {
	node int
	val  T
	err  error
}

// fanout calls fn on every node in idxs in parallel, each under its own
// per-node timeout, and returns every reply (a timed-out node returns its
// context error). It waits at most the node timeout.
func fanout[T any](ctx context.Context, c *Coordinator, idxs []int, fn func(ctx context.Context, n *node) (T, error)) []reply[T] {
	ch := make(chan reply[T], len(idxs))
	for _, i := range idxs {
		go func(n *node) {
			nctx, cancel := context.WithTimeout(ctx, c.opts.NodeTimeout)
			defer cancel()
			v, err := fn(nctx, n)
			if err != nil {
				err = &NodeError{Node: n.idx, Addr: n.addr, Err: err}
			}
			ch <- reply[T]{node: n.idx, val: v, err: err}
		}(c.nodes[i])
	}
	out := make([]reply[T], 0, len(idxs))
	for range idxs {
		out = append(out, <-ch)
	}
	return out
}

// all returns the indexes of every node.
func (c *Coordinator) all() []int {
	idxs := make([]int, len(c.nodes))
	for i := range idxs {
		idxs[i] = i
	}
	return idxs
}
