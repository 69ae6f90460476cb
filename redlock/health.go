package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
	"unicode/utf8"
)

// Node health.
//
// Each node has a health loop, started by New and stopped by Close: every
// Options.HealthInterval (first at once) it sends PING and INFO server in one
// round trip bounded by the node timeout, and records whether the node is up,
// the round trip's latency, the last error and the server's uptime. The
// uptime also feeds the restart quarantine, through the same code as the
// check made on every new connection (node.noteInfo). That connection check
// stays the primary defence: it runs before the first command of a
// connection, so a restarted node is caught before its first vote, while the
// loop may be up to an interval late. The loop catches a restart behind a
// proxy that keeps the gateway's connection open, and shows quarantine and
// outages in Status while no request is made.
//
// Between two ticks the answers to requests update the state too: a node
// that failed a command is shown down at once, one that answered is shown up.

// health is what is known of a node's health. It is never changed after it
// is stored: a new observation stores a new value.
type health struct {
	up      bool
	latency time.Duration // round trip of the last PING + INFO server
	err     string        // short description of the last error; "" when up
	uptime  time.Duration // uptime_in_seconds at the last check; 0 if unknown
	at      time.Time     // when it was observed
}

// startHealth starts the health loop of every node.
func (c *Coordinator) startHealth() {
	for _, n := range c.nodes {
		n.startHealth()
	}
}

// stopHealth stops every node's health loop and waits until they returned.
func (c *Coordinator) stopHealth() {
	for _, n := range c.nodes {
		n.stopHealth()
	}
}

// Status reports each node's health as last seen: by its health loop (PING
// and INFO server every Options.HealthInterval, bounded by the node timeout)
// and, in between, by the answers to requests. QuarantinedUntil is read at the
// call. Right after New it waits for the loops' first checks, which start at
// once and take at most about the node timeout, or until ctx ends.
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
		out[i] = NodeStatus{Addr: n.addr, QuarantinedUntil: n.quarantineEnd(now)}
		if h := n.health.Load(); h != nil {
			out[i].Up, out[i].Latency, out[i].Err = h.up, h.latency, h.err
			out[i].Uptime, out[i].Checked = h.uptime, h.at
		} else {
			out[i].Err = "not checked yet" // ctx ended before the first check
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

// stopHealth stops the health loop and waits until it returned. It may be
// called more than once, and on a node whose loop never started.
func (n *node) stopHealth() {
	if n.stopLoop == nil {
		return
	}
	n.stopLoop()
	<-n.loopDone
}

func (n *node) healthLoop(ctx context.Context) {
	defer close(n.loopDone)
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

// check sends PING and INFO server in one round trip, bounded by the node
// timeout, and records the outcome (nothing when ctx ended first). With
// quarantine on, a node whose INFO fails is down: it could not vote anyway,
// since every new connection must read its uptime first.
func (n *node) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, n.opts.NodeTimeout)
	defer cancel()
	start := time.Now()
	pipe := n.client.Pipeline()
	ping := pipe.Ping(cctx)
	info := pipe.Info(cctx, "server")
	_, execErr := pipe.Exec(cctx)
	at := time.Now()
	if ctx.Err() != nil {
		return // stopped, or the caller gave up: says nothing about the node
	}
	h := &health{latency: at.Sub(start), at: at}
	err := ping.Err()
	if err == nil && info.Err() == nil {
		err = execErr // the connection failed before any command (e.g. AUTH)
	}
	if err == nil {
		if ierr := info.Err(); ierr != nil {
			if !n.opts.NoQuarantine {
				err = fmt.Errorf("INFO server: %w", ierr)
			}
		} else {
			h.uptime, _ = uptime(info.Val())
			if !n.opts.NoQuarantine {
				if ierr := n.noteInfo(info.Val(), at); ierr != nil {
					err = fmt.Errorf("INFO server: %w", ierr)
				}
			}
		}
	}
	h.up = err == nil
	h.err = n.shortError(err)
	n.health.Store(h)
}

// noteReply records what a request's answer says about the node: an error
// means down, an answer means up. An error after ctx (the caller's) ended
// says nothing about the node.
func (n *node) noteReply(ctx context.Context, err error) {
	old := n.health.Load()
	if err == nil {
		if old != nil && old.up {
			return // nothing new; the common case allocates nothing
		}
	} else if ctx.Err() != nil {
		return
	}
	h := &health{up: err == nil, err: n.shortError(err), at: time.Now()}
	if old != nil {
		h.latency, h.uptime = old.latency, old.uptime
	}
	n.health.Store(h)
}

// maxErrLen bounds the length of an error shown in Status.
const maxErrLen = 120

// shortError describes err in a few words for Status. go-redis errors name
// the address at most, never credentials; a timeout says which one.
func (n *node) shortError(err error) string {
	if err == nil {
		return ""
	}
	var ne *NodeError
	if errors.As(err, &ne) {
		err = ne.Err
	}
	var nerr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout()) {
		return fmt.Sprintf("no answer within the node timeout (%v)", n.opts.NodeTimeout)
	}
	s := err.Error()
	if len(s) > maxErrLen {
		cut := maxErrLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
