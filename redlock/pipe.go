package redlock

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Command batching (auto-pipelining) on one connection per node.
//
// Each node has one connection for the fan-out commands, and a goroutine
// that reads its replies. At most one batch of commands is out on it at a
// time:
//
//   - A caller that finds the connection idle writes its command itself and
//     returns to wait for the round; the reader, parked in the network
//     poller, wakes when the reply comes. A lone client costs no hand-off
//     to another goroutine before its command is sent.
//   - A caller that finds a batch out queues its command. When the reader
//     has read the last reply of the batch, it writes everything queued
//     meanwhile as the next batch, in one write: concurrent requests share
//     round trips and syscalls, on the gateway's side and on Redis's.
//
// One batch out at a time makes the largest batches. With 64 concurrent
// clients on 5 local nodes (measured with the go-redis workers this
// replaced), one pipeline in flight per node gave 3.2 times the cycles/s of
// one goroutine per command, two gave 3.1 and four 2.9.
//
// Every command has a deadline (the per-node timeout), and the pipe ends it
// by then, so that callers need no timer of their own:
//
//   - The connection's deadline is the earliest of the batch out: if the
//     node has not answered by then, every command of the batch fails with
//     context.DeadlineExceeded and the connection is closed, since a late
//     reply could no longer be matched to its command.
//   - A queued command whose deadline passed before its batch could be
//     written fails without being sent.
//   - Commands queued while disconnected go out on a new connection, dialled
//     when there is work; dialling and the connection's setup share one
//     node timeout, and if they fail, so do the commands.
//
// The connection speaks RESP2 itself. It honours the node's Network, Addr,
// Dialer, TLSConfig, Username and Password (or CredentialsProvider), DB and
// ClientName; with the restart quarantine on, every new connection reads
// INFO server before its first command, as the go-redis connections do. The
// go-redis client of the node (health loop, NOSCRIPT fallback, NoBatching)
// is unchanged, and OnConnect runs on its connections only.

// maxQueued bounds the commands queued for one node: beyond it the node is
// far behind, and a command fails at once (the node counts as silent).
const maxQueued = 4096

var errQueueFull = errors.New("node queue full")

// call is one command for one node, as part of a round.
type call struct {
	enc      []byte // the command, RESP-encoded; shared by the round's calls, read-only
	res      result // set before round is told
	node     int
	deadline time.Time
	round    *round // told when res is set
}

// done sets the call's result and tells its round.
func (c *call) done(v any, err error) {
	c.res = result{v, err}
	c.round.arrive(c.node)
}

// pipe is a node's pipelined connection and its reader.
type pipe struct {
	n   *node
	opt *redis.Options

	mu       sync.Mutex
	conn     net.Conn // nil while disconnected
	inflight []*call  // the batch out: inflight[head:] await their replies
	head     int
	queued   []*call // for the next batch
	buf      []byte  // the next batch, encoded (the reader's, reused)
	closed   bool
	writeErr error         // why a write on conn failed (it was closed then)
	wake     chan struct{} // work queued while disconnected, or closed
	done     chan struct{} // closed when the reader returned

	// fault, set by tests before the first command, injects faults: a
	// command fails with fault(false) instead of being sent, or with
	// fault(true) instead of its reply.
	fault func(sent bool) error
}

func newPipe(n *node, opt *redis.Options) *pipe {
	p := &pipe{n: n, opt: opt, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go p.loop()
	return p
}

// submit sends c's command now if the connection is idle, or queues it for
// the next batch.
func (p *pipe) submit(c *call) {
	if p.fault != nil {
		if err := p.fault(false); err != nil {
			c.done(nil, err)
			return
		}
	}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		c.done(nil, redis.ErrClosed)
		return
	case p.conn != nil && !p.out():
		conn := p.conn
		p.inflight = append(p.inflight[:0], c)
		p.head = 0
		_ = conn.SetDeadline(c.deadline)
		p.mu.Unlock()
		p.write(conn, c.enc)
		return
	case len(p.queued) >= maxQueued:
		p.mu.Unlock()
		c.done(nil, errQueueFull)
		return
	}
	p.queued = append(p.queued, c)
	disconnected := p.conn == nil
	p.mu.Unlock()
	if disconnected {
		p.signal()
	}
}

// out reports whether a batch is out. Called with mu held.
func (p *pipe) out() bool { return p.head < len(p.inflight) }

func (p *pipe) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// close closes the connection and stops the reader; commands queued or out
// fail with redis.ErrClosed.
func (p *pipe) close() {
	p.mu.Lock()
	p.closed = true
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.mu.Unlock()
	p.signal()
	<-p.done
	p.mu.Lock()
	left := append(p.inflight[p.head:], p.queued...)
	p.inflight, p.queued = nil, nil
	p.mu.Unlock()
	for _, c := range left {
		c.done(nil, redis.ErrClosed)
	}
}

// loop connects when there is work and reads replies until the connection
// fails, until the pipe is closed.
func (p *pipe) loop() {
	defer close(p.done)
	for {
		conn, r := p.connect()
		if conn == nil {
			return
		}
		p.read(conn, r)
	}
}

// connect waits for queued work, dials, and sends the queued commands as
// the first batch. Commands queued while a dial fails fail with its error.
// It returns nil when the pipe is closed.
func (p *pipe) connect() (net.Conn, *bufio.Reader) {
	for {
		p.mu.Lock()
		closed, idle := p.closed, len(p.queued) == 0
		p.mu.Unlock()
		if closed {
			return nil, nil
		}
		if idle {
			<-p.wake
			continue
		}
		conn, r, err := p.dial()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			if conn != nil {
				_ = conn.Close()
			}
			return nil, nil
		}
		if err != nil {
			failed := p.queued
			p.queued = nil
			p.mu.Unlock()
			for _, c := range failed {
				c.done(nil, err)
			}
			continue
		}
		p.conn = conn
		next, expired := p.nextBatch(conn)
		p.mu.Unlock()
		p.send(conn, next, expired)
		return conn, r
	}
}

// nextBatch makes the queued commands the batch out, sets the connection's
// deadline to the earliest of theirs, and returns them encoded for one
// write, and those whose callers' deadlines have passed already (not sent).
// Called with mu held; nothing is out.
func (p *pipe) nextBatch(conn net.Conn) (enc []byte, expired []*call) {
	now := time.Now()
	p.inflight, p.queued = p.queued, p.inflight[:0]
	p.head = 0
	live := p.inflight[:0]
	var deadline time.Time
	p.buf = p.buf[:0]
	for _, c := range p.inflight {
		if !c.deadline.After(now) {
			expired = append(expired, c)
			continue
		}
		if deadline.IsZero() || c.deadline.Before(deadline) {
			deadline = c.deadline
		}
		live = append(live, c)
		p.buf = append(p.buf, c.enc...)
	}
	clear(p.inflight[len(live):])
	p.inflight = live
	_ = conn.SetDeadline(deadline) // zero, no deadline, when idle
	return p.buf, expired
}

// send writes a batch from nextBatch and fails its expired calls.
func (p *pipe) send(conn net.Conn, enc []byte, expired []*call) {
	if len(enc) > 0 {
		p.write(conn, enc)
	}
	for _, c := range expired {
		c.done(nil, context.DeadlineExceeded)
	}
}

// write writes a batch out. If that fails, it closes the connection: the
// reader then fails the batch, with this error.
func (p *pipe) write(conn net.Conn, enc []byte) {
	if _, err := conn.Write(enc); err != nil {
		p.mu.Lock()
		if p.conn == conn && p.writeErr == nil {
			p.writeErr = err
		}
		p.mu.Unlock()
		_ = conn.Close()
	}
}

// read reads replies and hands each to its call, and writes the next batch
// when a batch is complete. It returns when the connection fails; the
// calls out on it fail with the error.
func (p *pipe) read(conn net.Conn, r *bufio.Reader) {
	for {
		v, err := readReply(r)
		p.mu.Lock()
		if err == nil && !p.out() {
			err = errors.New("redis: reply to no command") // out of step: drop the connection
		}
		if err != nil {
			if p.writeErr != nil {
				err = p.writeErr // the reader saw only the connection closed
			}
			failed := p.inflight[p.head:]
			p.inflight, p.head = nil, 0
			p.conn, p.writeErr = nil, nil
			p.mu.Unlock()
			_ = conn.Close()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = context.DeadlineExceeded // the node's timeout, as for a silent node
			}
			for _, c := range failed {
				c.done(nil, err)
			}
			return
		}
		c := p.inflight[p.head]
		p.inflight[p.head] = nil
		p.head++
		var (
			next    []byte
			expired []*call
		)
		if !p.out() {
			next, expired = p.nextBatch(conn)
		}
		p.mu.Unlock()
		if next != nil || expired != nil {
			p.send(conn, next, expired)
		}
		if p.fault != nil {
			if err := p.fault(true); err != nil {
				c.done(nil, err)
				continue
			}
		}
		if e, ok := v.(redisError); ok {
			c.done(nil, e)
		} else if v == nil {
			c.done(nil, redis.Nil)
		} else {
			c.done(v, nil)
		}
	}
}

// dial opens a connection to the node, and authenticates it, selects its
// database, names it and, with the restart quarantine on, reads the
// server's uptime, all within the node timeout.
func (p *pipe) dial() (net.Conn, *bufio.Reader, error) {
	deadline := time.Now().Add(p.n.opts.NodeTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	o := p.opt
	network := o.Network
	if network == "" {
		network = "tcp"
	}
	var (
		conn net.Conn
		err  error
	)
	if o.Dialer != nil {
		conn, err = o.Dialer(ctx, network, o.Addr)
	} else {
		d := net.Dialer{KeepAlive: 5 * time.Minute}
		conn, err = d.DialContext(ctx, network, o.Addr)
		if err == nil && o.TLSConfig != nil {
			tc := tls.Client(conn, o.TLSConfig)
			if err = tc.HandshakeContext(ctx); err != nil {
				_ = conn.Close()
			}
			conn = tc
		}
	}
	if err != nil {
		return nil, nil, err
	}
	r := bufio.NewReaderSize(conn, 16<<10)
	if err := p.hello(conn, r, deadline); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, r, nil
}

// hello sends a new connection's setup commands in one round trip.
func (p *pipe) hello(conn net.Conn, r *bufio.Reader, deadline time.Time) error {
	o := p.opt
	user, pass := o.Username, o.Password
	if o.CredentialsProvider != nil {
		user, pass = o.CredentialsProvider()
	}
	var (
		enc   []byte
		names []string
	)
	add := func(args ...any) {
		enc = appendCommand(enc, args...)
		names = append(names, args[0].(string))
	}
	switch {
	case pass != "" && user != "":
		add("AUTH", user, pass)
	case pass != "":
		add("AUTH", pass)
	}
	if o.DB > 0 {
		add("SELECT", o.DB)
	}
	if o.ClientName != "" {
		add("CLIENT", "SETNAME", o.ClientName)
	}
	if !p.n.opts.NoQuarantine {
		add("INFO", "server")
	}
	if len(enc) == 0 {
		return nil
	}
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write(enc); err != nil {
		return err
	}
	var first error
	for _, name := range names {
		v, err := readReply(r)
		if err != nil {
			return err
		}
		if e, ok := v.(redisError); ok {
			if first == nil {
				first = fmt.Errorf("%s: %w", name, e)
			}
			continue
		}
		if name == "INFO" && first == nil {
			info, _ := v.(string)
			first = p.n.noteInfo(info, time.Now())
		}
	}
	if first != nil {
		return first
	}
	return conn.SetDeadline(time.Time{})
}

// redisError is an error reply. It is a redis.Error, so that
// redis.HasErrorPrefix and errors.As see it as one.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// maxReplyLen bounds a bulk string or array in a reply: the scripts answer
// a few integers, INFO a few kilobytes.
const maxReplyLen = 1 << 20

// readReply reads one RESP2 reply as go-redis represents it: a simple or
// bulk string as string, an integer as int64, an array as []any, a null as
// nil, and an error reply as redisError.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			err = errors.New("redis: reply line too long")
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("redis: malformed reply %q", truncateLine(line))
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return string(body), nil
	case '-':
		return redisError(body), nil
	case ':':
		n, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis: malformed integer %q", truncateLine(line))
		}
		return n, nil
	case '$', '*':
		n, err := strconv.Atoi(string(body))
		if err != nil || n < -1 || n > maxReplyLen {
			return nil, fmt.Errorf("redis: malformed length %q", truncateLine(line))
		}
		if n == -1 {
			return nil, nil
		}
		if kind == '$' {
			b := make([]byte, n+2)
			if _, err := io.ReadFull(r, b); err != nil {
				return nil, err
			}
			if b[n] != '\r' || b[n+1] != '\n' {
				return nil, errors.New("redis: malformed bulk string")
			}
			return string(b[:n]), nil
		}
		a := make([]any, n)
		for i := range a {
			v, err := readReply(r)
			if err != nil {
				return nil, err
			}
			a[i] = v
		}
		return a, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", truncateLine(line))
}

// truncateLine shortens a reply line for an error message.
func truncateLine(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// appendCommand appends a command in RESP: an array of bulk strings.
// Arguments are strings, []byte or integers.
func appendCommand(b []byte, args ...any) []byte {
	return appendArgs(appendArrayLen(b, len(args)), args)
}

// appendArrayLen appends the header of a command of n arguments.
func appendArrayLen(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendArgs appends args as bulk strings.
func appendArgs(b []byte, args []any) []byte {
	for _, a := range args {
		switch v := a.(type) {
		case string:
			b = appendBulk(b, v)
		case []byte:
			b = appendBulk(b, v)
		case int:
			b = appendInt(b, int64(v))
		case int64:
			b = appendInt(b, v)
		default:
			b = appendBulk(b, fmt.Sprint(v))
		}
	}
	return b
}

func appendBulk[S string | []byte](b []byte, s S) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendInt appends an integer argument as a bulk string.
func appendInt(b []byte, v int64) []byte {
	var digits [20]byte
	return appendBulk(b, strconv.AppendInt(digits[:0], v, 10))
}
