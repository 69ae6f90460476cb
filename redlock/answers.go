package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// noteReply records what a request's answer says about the node (see the
// package comment). A node down already keeps the description of its check;
// an error after the caller's ctx ended says nothing about the node.
func (n *node) noteReply(ctx context.Context, err error) {
	old := n.health.Load()
	if err == nil {
		if old == nil || old.up || old.refused {
			return // the common case allocates nothing
		}
		n.health.Store(&health{up: true, latency: old.latency, uptime: old.uptime, at: time.Now()})
		return
	}
	if ctx.Err() != nil {
		return
	}
	code := errCode(err)
	if code == "READONLY" {
		n.markReplica()
	}
	if old != nil && !old.up && (old.refused || code == "") {
		return // down already, and this says no more
	}
	h := &health{err: n.describe(err), refused: code != "", at: time.Now()}
	if old != nil {
		h.latency, h.uptime = old.latency, old.uptime
	}
	n.health.Store(h)
}

// maxErrLen bounds the length of an error shown in Status.
const maxErrLen = 120

// refusals describes the error replies by which Redis refuses a command for
// a state of the node rather than of the command.
var refusals = map[string]string{
	"READONLY":   errReplica,
	"OOM":        "OOM: at maxmemory, refuses writes",
	"MISCONF":    "MISCONF: cannot persist to disk, refuses writes",
	"LOADING":    "LOADING: loading its dataset",
	"BUSY":       "BUSY: running a slow script",
	"MASTERDOWN": "MASTERDOWN: replica cut off from its master",
	"NOREPLICAS": "NOREPLICAS: too few replicas, refuses writes",
}

// describe describes err in a few words for Status. go-redis errors name
// the address at most, never credentials; a timeout says which one.
func (n *node) describe(err error) string {
	if err == nil {
		return ""
	}
	if isTimeout(err) {
		return fmt.Sprintf("no answer within the node timeout (%v)", n.opts.NodeTimeout)
	}
	if d, ok := refusals[errCode(err)]; ok {
		return d
	}
	s := err.Error()
	if len(s) > maxErrLen {
		s = strings.ToValidUTF8(s[:maxErrLen], "") + "…" // a rune cut in two is dropped
	}
	return s
}

// isTimeout reports whether err is a command's timeout.
func isTimeout(err error) bool {
	var nerr net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout())
}

// errCode returns the first word of a Redis error reply in err (READONLY,
// OOM, NOAUTH, ERR, ...), or "" if err holds none.
func errCode(err error) string {
	var re redis.Error
	if !errors.As(err, &re) {
		return ""
	}
	code, _, _ := strings.Cut(re.Error(), " ")
	return code
}
