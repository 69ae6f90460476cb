package main

import (
	"container/list"
	"crypto/tls"
	"errors"
	"math"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/redlock"
)

// defaultMaxConnections is the default of --max-connections: far below the
// open-files limit of a server, far above what a few load balancers or some
// hundred clients keep open.
const defaultMaxConnections = 4096

// connLogEvery spaces the summaries of the connections closed at the cap
// (see note); outOfFilesPause is how long Accept pauses when it runs out of
// open files and no connection can be closed.
const (
	connLogEvery    = time.Minute
	outOfFilesPause = 100 * time.Millisecond
)

// connLimit returns the cap on open client connections: want, lowered to
// leave room under the process's open-files limit (RLIMIT_NOFILE, which the
// Go runtime raises to its hard limit at start-up) for the Redis connections
// of nodes nodes and everything else; and that limit (0: unknown or none).
func connLimit(want, nodes int, dev bool) (limit int, nofile uint64) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > math.MaxInt32 {
		return want, 0
	}
	// go-redis keeps up to 10 connections per GOMAXPROCS per node (at most
	// the CPUs: an upper bound that does not read the runtime's setting),
	// those of its pipeline pool, and the pub/sub one; an embedded dev node
	// holds the other end of each too.
	perNode := 10*runtime.NumCPU() + redlock.PipelineConns + 2
	if dev {
		perNode *= 2
	}
	room := max(int(r.Cur)-nodes*perNode-64, int(r.Cur)/2)
	return min(want, room), r.Cur
}

// connLimiter is a listener that caps the open client connections, so that
// idle or silent ones cannot use up the open files. It counts each
// connection until it is closed; the ConnState hook tells it which wait for
// a request: fresh ones (accepted, no request completed yet: silent, or
// sending their first request's headers) and idle keep-alive ones. At the
// cap a new connection closes the oldest fresh one, else the one idle the
// longest, so that neither silent nor idle connections can keep an
// operator's /healthz out; or is closed at once if every connection is
// serving a request. A legitimate client sends its request as soon as it
// is connected, so its connection stays fresh for a moment only: to have it
// closed, an attacker must open as many connections as the cap within that
// moment.
type connLimiter struct {
	net.Listener
	max int
	log zerolog.Logger

	mu    sync.Mutex
	open  int
	fresh list.List // of *limitedConn, the oldest first
	idle  list.List // of *limitedConn, the one idle the longest first
	// What note reported: whether the cap and the open files ran out
	// before, when the last line was logged, and what happened since.
	warnedCap, warnedFiles bool
	lastReport             time.Time
	dropped, outOfFiles    int
}

// newConnLimiter returns ln with at most max connections open.
func newConnLimiter(ln net.Listener, max int, log zerolog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, max: max, log: log}
}

// ConnState is the http.Server.ConnState hook: it keeps track of the fresh
// and the idle connections.
func (l *connLimiter) ConnState(c net.Conn, state http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	var q *list.List
	switch state {
	case http.StateNew:
		q = &l.fresh
	case http.StateIdle:
		q = &l.idle
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.gone || (q != nil && lc.queue == q) {
		return
	}
	lc.dequeue()
	if q != nil {
		lc.elem, lc.queue = q.PushBack(lc), q
	}
}

// admit counts c in, closing a waiting connection at the cap (see victim),
// and returns it wrapped; or closes c and returns nil if none can be
// closed. With outOfFiles (Accept failed for want of open files: the limit
// may be shared) c is nil, and if none can be closed admit pauses.
func (l *connLimiter) admit(c net.Conn, outOfFiles bool) net.Conn {
	l.mu.Lock()
	full := outOfFiles || l.open >= l.max
	var victim *limitedConn
	if full {
		if victim = l.victim(); victim != nil {
			l.forget(victim)
		}
	}
	refused := full && victim == nil
	if c != nil && !refused {
		l.open++
	}
	var report *zerolog.Event // nil-safe: nothing to log
	var msg string
	if full {
		report, msg = l.note(outOfFiles)
	}
	l.mu.Unlock()

	report.Msg(msg)
	switch {
	case victim != nil:
		_ = victim.Conn.Close()
	case outOfFiles: // c is nil
		time.Sleep(outOfFilesPause)
	case refused:
		_ = c.Close()
	}
	if c == nil || refused {
		return nil
	}
	return &limitedConn{Conn: c, l: l}
}

// victim returns, with l.mu held, the connection to close to make room:
// the oldest fresh one, else the one idle the longest; nil if there is
// none.
func (l *connLimiter) victim() *limitedConn {
	for _, q := range []*list.List{&l.fresh, &l.idle} {
		if e := q.Front(); e != nil {
			return e.Value.(*limitedConn)
		}
	}
	return nil
}

// note counts, with l.mu held, a connection dropped at the cap or an Accept
// out of open files, and returns the line due once l.mu is released: the
// first time each happens, then a summary at most once per connLogEvery.
func (l *connLimiter) note(outOfFiles bool) (*zerolog.Event, string) {
	warned := &l.warnedCap
	if outOfFiles {
		warned = &l.warnedFiles
		l.outOfFiles++
	} else {
		l.dropped++
	}
	var e *zerolog.Event
	var msg string
	switch {
	case !*warned && outOfFiles:
		e, msg = l.log.Error(), "out of open files: closing waiting connections to make room; lower --max-connections or raise the open-files limit (ulimit -n)"
	case !*warned:
		e, msg = l.log.Warn(), "connection limit reached: each new connection closes the oldest one that has not completed a request, else the one idle the longest, or is closed at once if every connection is busy (--max-connections)"
	case time.Since(l.lastReport) >= connLogEvery:
		e = l.log.Warn().Int("dropped", l.dropped).Int("out_of_files", l.outOfFiles).Dur("over", connLogEvery)
		msg = "connection limit: connections closed since the last report"
	default:
		return nil, ""
	}
	*warned, l.dropped, l.outOfFiles, l.lastReport = true, 0, 0, time.Now()
	return e.Int("max_connections", l.max), msg
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		outOfFiles := errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
		if err != nil && !outOfFiles {
			return nil, err
		}
		if lc := l.admit(c, outOfFiles); lc != nil {
			return lc, nil
		}
	}
}

// limitedConn is a connection counted by a connLimiter until it is closed.
type limitedConn struct {
	net.Conn
	l *connLimiter
	// Guarded by l.mu: elem is the connection's element of queue (l.fresh
	// or l.idle) while it waits for a request, else both are nil; gone is
	// set once it is counted out.
	elem  *list.Element
	queue *list.List
	gone  bool
}

// dequeue takes c out of its queue, if any, with c.l.mu held.
func (c *limitedConn) dequeue() {
	if c.queue != nil {
		c.queue.Remove(c.elem)
		c.elem, c.queue = nil, nil
	}
}

// forget counts c out, once, with l.mu held.
func (l *connLimiter) forget(c *limitedConn) {
	if c.gone {
		return
	}
	c.gone = true
	l.open--
	c.dequeue()
}

// Close counts c out and closes it.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.forget(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite half-closes the connection, as net/http does before closing
// one after an error answer (431, 400) so that the client reads the answer
// instead of a reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
