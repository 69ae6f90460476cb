package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

// Parking: waiting acquires off the HTTP server.
//
// An acquire with wait_ms may wait for up to --max-wait behind others. Served
// the usual way, each waiting request holds net/http's connection goroutine
// (an 8 KiB stack), its background-read goroutine and about 11 KiB of
// connection buffers: some 30 KB a waiter, 300 MB for 10,000. So an HTTP/1.x
// acquire that would queue behind other waiters of this server is parked:
// its handler hijacks the connection and returns, which frees all that; a
// goroutine waits for the lock on a shallow stack; another watches the
// connection so that a client that goes away leaves the queue at once. The
// response is made by the same code as ever, into a recorder, and written to
// the connection, which then goes back to the HTTP server for its next
// request through Server.Returned (or is closed if nothing serves that).
// Parked requests are logged and counted in the metrics like the others.
//
// The head of a queue, and any acquire on HTTP/2 (which cannot be hijacked),
// waits in its handler as before. A client that pipelines its next request
// behind a parked acquire is not watched any more once those bytes arrive:
// they are kept for the HTTP server, and the acquire waits for the lock or
// the end of its wait.

// parkedWriteTimeout bounds the write of a parked acquire's response.
const parkedWriteTimeout = 10 * time.Second

// parkedAcquire is the response of an acquire to park: visiting it parks the
// request, or, if its connection cannot be hijacked, waits in place.
type parkedAcquire struct {
	s        *Server
	ctx      context.Context
	resource string
	o        redlock.AcquireOptions
}

func (p *parkedAcquire) VisitAcquireLockResponse(w http.ResponseWriter) error {
	s := p.s
	rq := reqInfoOf(p.ctx)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2, or a ResponseWriter that cannot be hijacked: wait here.
		defer s.leaveWaiter(p.o.Namespace)
		resp, err := s.acquireWaiting(p.ctx, p.resource, p.o)
		if err != nil {
			return err
		}
		return resp.VisitAcquireLockResponse(w)
	}
	rq.parked = true
	pc := &parkedConn{Conn: conn, watching: make(chan struct{})}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		pc.ahead = bytes.Clone(b)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(p.ctx))
	s.parked.Add(1)
	s.parkedNow.Add(1)
	go s.serveParked(p, pc, w.Header().Clone(), ctx, cancel)
	return nil
}

// serveParked waits for a parked acquire's lock, answers it and logs it, and
// hands its connection back to the HTTP server.
func (s *Server) serveParked(p *parkedAcquire, pc *parkedConn, header http.Header, ctx context.Context, cancel context.CancelFunc) {
	defer s.parked.Done()
	defer s.parkedNow.Add(-1)
	defer cancel()
	go pc.watch(cancel)
	rq := reqInfoOf(p.ctx)
	r := rq.r
	rec := &recorder{header: header}
	func() {
		defer func() {
			if v := recover(); v != nil {
				s.recovered(rec, r, v)
			}
		}()
		defer s.leaveWaiter(p.o.Namespace)
		resp, err := s.acquireWaiting(ctx, p.resource, p.o)
		if err == nil {
			err = resp.VisitAcquireLockResponse(rec)
		}
		if err != nil {
			s.writeProblem(rec, r, err)
		}
	}()
	keepAlive := !r.Close && ctx.Err() == nil && s.returned.serving.Load()
	err := rec.writeTo(pc.Conn, keepAlive)
	s.logRequest(r, rq, rec.Status())
	pc.unwatch()
	if err != nil || !keepAlive || pc.gone {
		_ = pc.Conn.Close()
		return
	}
	s.returned.put(pc.conn())
}

// parkedConn is the connection of a parked acquire.
type parkedConn struct {
	net.Conn
	// ahead holds bytes of the client's next request, read before the
	// response: from net/http's buffer, or by watch.
	ahead []byte
	// watching is closed when watch returns; gone is set before if the
	// client went away.
	watching chan struct{}
	gone     bool
}

// watch reads the connection until the client goes away, when it calls
// cancel, or sends more (the next request, whose bytes it keeps), or
// unwatch stops it.
func (pc *parkedConn) watch(cancel context.CancelFunc) {
	defer close(pc.watching)
	var b [1]byte
	n, err := pc.Conn.Read(b[:])
	switch {
	case n > 0:
		pc.ahead = append(pc.ahead, b[:n]...)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// unwatch
	default:
		pc.gone = true
		cancel()
	}
}

// unwatch stops watch and waits for it to return.
func (pc *parkedConn) unwatch() {
	_ = pc.Conn.SetReadDeadline(time.Unix(1, 0))
	<-pc.watching
	_ = pc.Conn.SetReadDeadline(time.Time{})
}

// conn returns the connection to hand back: the hijacked one itself (which
// net/http knows, e.g. as a *tls.Conn), or one that first replays the bytes
// read ahead.
func (pc *parkedConn) conn() net.Conn {
	if len(pc.ahead) == 0 {
		return pc.Conn
	}
	return &aheadConn{Conn: pc.Conn, ahead: pc.ahead}
}

// aheadConn is a connection whose first bytes were read already.
type aheadConn struct {
	net.Conn
	ahead []byte
}

// NetConn returns the connection under c, as tls.Conn.NetConn does.
func (c *aheadConn) NetConn() net.Conn { return c.Conn }

func (c *aheadConn) Read(p []byte) (int, error) {
	if len(c.ahead) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.ahead)
	c.ahead = c.ahead[n:]
	return n, nil
}

// recorder is the http.ResponseWriter a parked acquire's response is made
// with.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Status() int         { return r.status }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// writeTo writes the recorded response to c as HTTP/1.1, with "Connection:
// close" unless keepAlive.
func (r *recorder) writeTo(c net.Conn, keepAlive bool) error {
	r.status = cmp.Or(r.status, http.StatusOK)
	r.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	r.header.Set("Content-Length", strconv.Itoa(r.body.Len()))
	resp := http.Response{
		StatusCode: r.status, ProtoMajor: 1, ProtoMinor: 1,
		Header: r.header, ContentLength: int64(r.body.Len()), Body: io.NopCloser(&r.body),
		Close: !keepAlive,
	}
	var buf bytes.Buffer
	if err := resp.Write(&buf); err != nil {
		return err
	}
	_ = c.SetWriteDeadline(time.Now().Add(parkedWriteTimeout))
	_, err := c.Write(buf.Bytes())
	_ = c.SetWriteDeadline(time.Time{})
	return err
}

// returned is the listener of Server.Returned.
type returned struct {
	conns   chan net.Conn
	done    chan struct{}
	close   sync.Once
	serving atomic.Bool
}

func newReturned() *returned {
	return &returned{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Returned returns a net.Listener that accepts the connections of parked
// acquires (see park.go) once they are answered. Serve the server's
// http.Server on it too, next to the main listener, so that they stay alive
// for the client's next request; while nothing serves it, they are closed
// after their response. Closing it, as http.Server.Shutdown does, closes the
// connections returned later.
func (s *Server) Returned() net.Listener { return s.returned }

func (l *returned) Accept() (net.Conn, error) {
	l.serving.Store(true)
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *returned) Close() error {
	l.close.Do(func() { close(l.done) })
	return nil
}

func (l *returned) Addr() net.Addr { return returnedAddr{} }

// put hands c to the HTTP server, or closes it.
func (l *returned) put(c net.Conn) {
	if !l.serving.Load() {
		_ = c.Close()
		return
	}
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

type returnedAddr struct{}

func (returnedAddr) Network() string { return "parked" }
func (returnedAddr) String() string  { return "parked connections" }

// WaitParked waits until every parked acquire has been answered, or ctx
// ends. After BeginShutdown that is at once: they are answered 503
// shutting-down.
func (s *Server) WaitParked(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.parked.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ api.AcquireLockResponseObject = (*parkedAcquire)(nil)
