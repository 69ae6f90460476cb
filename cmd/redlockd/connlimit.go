package main

import (
	"container/list"
	"errors"
	"math"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// defaultMaxConnections is the default of --max-connections: far below the
// open-files limit of a server, far above what a few load balancers or some
// hundred clients keep open.
const defaultMaxConnections = 4096

// Connection limit reports: the first time the limit is reached (or the
// process runs out of open files) is logged at once, later ones are summed
// up at most once per connLogEvery; outOfFilesPause is how long Accept
// pauses when it runs out of open files and no idle connection can be
// closed.
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
	// go-redis keeps up to 10 connections per GOMAXPROCS per node, plus the
	// pub/sub one; an embedded dev node holds the other end of each too.
	// GOMAXPROCS is at most the number of CPUs, so this is an upper bound
	// that does not read (or pin) the runtime's own setting.
	perNode := 10*runtime.NumCPU() + 2
	if dev {
		perNode *= 2
	}
	room := max(int(r.Cur)-nodes*perNode-64, int(r.Cur)/2)
	return min(want, room), r.Cur
}

// connLimiter caps the open client connections of the HTTP servers, so that
// idle connections cannot use up the process's open files (the gateway then
// accepts nothing until some close). Its listener counts each accepted
// connection until it is closed (a hijacked one too, until its parked
// acquire closes it); the servers' ConnState hook tells it which are idle.
// At the cap, a new connection closes the one idle the longest (which costs
// its client a reconnect, as --idle-timeout does), so that a flood of idle
// connections cannot keep an operator's /healthz out; if none is idle, the
// new connection is closed at once.
type connLimiter struct {
	max int
	log zerolog.Logger

	mu   sync.Mutex
	open int
	idle list.List // of *limitedConn, the one idle the longest first
	// What to report (see report).
	warnedCap, warnedFiles bool
	lastReport             time.Time
	closedIdle, refused    int
	outOfFiles             int
}

func newConnLimiter(max int, log zerolog.Logger) *connLimiter {
	return &connLimiter{max: max, log: log}
}

// Listener returns ln with the limit applied.
func (l *connLimiter) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: l}
}

// ConnState is the http.Server.ConnState hook: it keeps track of the idle
// connections.
func (l *connLimiter) ConnState(c net.Conn, state http.ConnState) {
	lc := limitedOf(c)
	if lc == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case state == http.StateIdle && lc.elem == nil && !lc.gone:
		lc.elem = l.idle.PushBack(lc)
	case state != http.StateIdle && lc.elem != nil:
		l.idle.Remove(lc.elem)
		lc.elem = nil
	}
}

// limitedOf returns the connection of the listener under c (c itself, or
// under a *tls.Conn or a parked acquire's connection); nil if none.
func limitedOf(c net.Conn) *limitedConn {
	for {
		switch v := c.(type) {
		case *limitedConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

// admit counts c in, closing the connection idle the longest to make room
// at the cap, and returns it wrapped; or closes c and returns nil if the cap
// is reached and no connection is idle.
func (l *connLimiter) admit(c net.Conn) net.Conn {
	l.mu.Lock()
	var victim *limitedConn
	full := l.open >= l.max
	if full {
		victim = l.popIdle()
		if victim == nil {
			l.refused++
		}
	}
	if victim != nil || !full {
		l.open++
	}
	report := full && l.reportDue(time.Now())
	l.mu.Unlock()

	if report {
		l.report()
	}
	if victim != nil {
		_ = victim.Conn.Close()
	}
	if full && victim == nil {
		_ = c.Close()
		return nil
	}
	return &limitedConn{Conn: c, l: l}
}

// popIdle counts out the connection idle the longest and returns it, for
// the caller to close after unlocking l.mu; nil if none is idle.
func (l *connLimiter) popIdle() *limitedConn {
	e := l.idle.Front()
	if e == nil {
		return nil
	}
	lc := l.idle.Remove(e).(*limitedConn)
	lc.elem, lc.gone = nil, true
	l.open--
	l.closedIdle++
	return lc
}

// release counts c out, once.
func (l *connLimiter) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.gone {
		return
	}
	c.gone = true
	l.open--
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
}

// acceptFailed handles an Accept that failed for want of open files (which
// the cap should prevent, but the limit may be shared): it closes the
// connection idle the longest, or pauses if none is idle.
func (l *connLimiter) acceptFailed() {
	l.mu.Lock()
	victim := l.popIdle()
	l.outOfFiles++
	report := l.reportDue(time.Now())
	l.mu.Unlock()
	if report {
		l.report()
	}
	if victim != nil {
		_ = victim.Conn.Close()
		return
	}
	time.Sleep(outOfFilesPause)
}

// reportDue reports, with l.mu held, whether report should be called now.
func (l *connLimiter) reportDue(now time.Time) bool {
	if (!l.warnedCap && l.closedIdle+l.refused > 0) || (!l.warnedFiles && l.outOfFiles > 0) {
		return true
	}
	return now.Sub(l.lastReport) >= connLogEvery
}

// report logs that the limit was reached, or the open files ran out, the
// first time each happens, then at most once per connLogEvery what was done
// since the last line.
func (l *connLimiter) report() {
	l.mu.Lock()
	first := !l.warnedCap && l.closedIdle+l.refused > 0
	firstFiles := !l.warnedFiles && l.outOfFiles > 0
	closedIdle, refused, outOfFiles := l.closedIdle, l.refused, l.outOfFiles
	l.warnedCap = l.warnedCap || first
	l.warnedFiles = l.warnedFiles || firstFiles
	l.closedIdle, l.refused, l.outOfFiles = 0, 0, 0
	l.lastReport = time.Now()
	l.mu.Unlock()

	if first {
		l.log.Warn().Int("max_connections", l.max).
			Msg("connection limit reached: each new connection closes the one idle the longest, or is closed at once if none is idle (--max-connections)")
	}
	if firstFiles {
		l.log.Error().Int("max_connections", l.max).
			Msg("out of open files: closing idle connections to make room; lower --max-connections or raise the open-files limit (ulimit -n)")
	}
	if !first && !firstFiles && closedIdle+refused+outOfFiles > 0 {
		l.log.Warn().Int("max_connections", l.max).Int("closed_idle", closedIdle).Int("refused", refused).Int("out_of_files", outOfFiles).
			Dur("over", connLogEvery).Msg("connection limit: connections closed since the last report")
	}
}

// limitListener is connLimiter's listener.
type limitListener struct {
	net.Listener
	l *connLimiter
}

func (ln *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			ln.l.acceptFailed()
			continue
		}
		if err != nil {
			return nil, err
		}
		if lc := ln.l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// limitedConn is a connection counted by a connLimiter until it is closed.
type limitedConn struct {
	net.Conn
	l *connLimiter
	// Guarded by l.mu: elem is the connection's element of l.idle while it
	// is idle; gone is set once it is counted out.
	elem *list.Element
	gone bool
}

func (c *limitedConn) Close() error {
	c.l.release(c)
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
