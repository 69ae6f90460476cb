// Package faultproxy is a TCP proxy for fault-injection tests: it listens on
// a free port of 127.0.0.1, forwards every connection to one target, and can
// add latency per direction, limit bandwidth, cut every connection or
// blackhole traffic, and restore it.
//
// Faults act on the bytes, not on packets: latency delays each chunk read
// from one side by the latency in force when it was read (order kept);
// bandwidth spaces out writes; a blackhole stops forwarding but keeps
// connections open and holds the data, as a partition does while TCP
// retransmits (it flows again on Restore); a cut resets every connection.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// chunkSize is the largest read, and the most data held per direction of a
// connection is queueLen chunks: beyond that the proxy stops reading and TCP
// pushes back.
const (
	chunkSize = 32 << 10
	queueLen  = 64
)

// Proxy forwards connections from Addr to a target with faults injected.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu        sync.Mutex
	up, down  time.Duration // latency client→target, target→client
	bandwidth int           // bytes per second per direction of a connection; 0: unlimited
	cut       bool
	blackhole bool
	changed   chan struct{} // closed and replaced on every change of the above
	links     map[*link]struct{}
	closed    bool
	accepted  int

	wg sync.WaitGroup
}

// Start listens on 127.0.0.1:0 and forwards each connection to target
// (host:port), dialled when the connection is accepted.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the host:port connections are forwarded to.
func (p *Proxy) Target() string { return p.target }

// SetLatency adds d to each direction (so d*2 to a round trip), for data
// read from now on.
func (p *Proxy) SetLatency(d time.Duration) { p.SetLatencies(d, d) }

// SetLatencies adds up to data from client to target and down to data from
// target to client, for data read from now on.
func (p *Proxy) SetLatencies(up, down time.Duration) {
	p.update(func() { p.up, p.down = up, down })
}

// SetBandwidth limits each direction of each connection to bytesPerSecond
// (0: unlimited).
func (p *Proxy) SetBandwidth(bytesPerSecond int) {
	p.update(func() { p.bandwidth = max(0, bytesPerSecond) })
}

// Cut resets every open connection (the client sees "connection reset") and
// resets new ones as soon as they are accepted, until Restore.
func (p *Proxy) Cut() {
	var links []*link
	p.update(func() {
		p.cut = true
		for l := range p.links {
			links = append(links, l)
		}
	})
	for _, l := range links {
		l.close(true)
	}
}

// Blackhole stops forwarding in both directions, on open and new connections
// alike, until Restore: connections stay open and nothing comes back, as
// behind a partition or from a stopped process. Data sent meanwhile is held
// and delivered after Restore.
func (p *Proxy) Blackhole() { p.update(func() { p.blackhole = true }) }

// Restore ends Cut and Blackhole. Latency and bandwidth stay as set.
func (p *Proxy) Restore() { p.update(func() { p.cut, p.blackhole = false, false }) }

// Conns is the number of connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Accepted is the number of connections accepted so far, cut ones included.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines. It may be called more than once.
func (p *Proxy) Close() error {
	var links []*link
	p.update(func() {
		p.closed = true
		for l := range p.links {
			links = append(links, l)
		}
	})
	err := p.ln.Close()
	for _, l := range links {
		l.close(false)
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// update changes the settings under the lock and wakes every waiter.
func (p *Proxy) update(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		p.accepted++
		cut, closed := p.cut, p.closed
		p.mu.Unlock()
		if cut || closed {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for client c and forwards both ways.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	t, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(c) // as if the target refused
		return
	}
	l := &link{client: c, target: t, done: make(chan struct{})}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		l.close(true)
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, c, t, true) }()
	go func() { defer wg.Done(); p.pipe(l, t, c, false) }()
	wg.Wait()
	l.close(false)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// link is one proxied connection.
type link struct {
	client, target net.Conn
	once           sync.Once
	done           chan struct{} // closed when the link is closed
}

// close closes both sides; with rst the client gets a reset, not an EOF.
func (l *link) close(rst bool) {
	l.once.Do(func() {
		close(l.done)
		if rst {
			reset(l.client)
		} else {
			_ = l.client.Close()
		}
		_ = l.target.Close()
	})
}

// reset closes c with a TCP RST.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// chunk is data read from one side, due at the other at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe forwards src to dst: one goroutine reads and stamps chunks with the
// latency, this one delivers them on time, within the bandwidth, unless
// blackholed. When either side ends, the link is closed.
func (p *Proxy) pipe(l *link, src, dst net.Conn, upstream bool) {
	q := make(chan chunk, queueLen)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				lat := p.down
				if upstream {
					lat = p.up
				}
				p.mu.Unlock()
				select {
				case q <- chunk{data: buf[:n], due: time.Now().Add(lat)}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		l.close(false) // ends the reader's Read
		for range q {  // and waits for it
		}
	}()
	for c := range q {
		if !p.deliver(l, dst, c) {
			return
		}
	}
}

// deliver writes c to dst when it is due, not blackholed, and within the
// bandwidth. It reports false when the link is over.
func (p *Proxy) deliver(l *link, dst net.Conn, c chunk) bool {
	if !sleepUntil(l, c.due) {
		return false
	}
	data := c.data
	for len(data) > 0 {
		// Wait while blackholed.
		var bw int
		for {
			p.mu.Lock()
			bh, ch := p.blackhole, p.changed
			bw = p.bandwidth
			p.mu.Unlock()
			if !bh {
				break
			}
			select {
			case <-ch:
			case <-l.done:
				return false
			}
		}
		n := len(data)
		if bw > 0 {
			n = min(n, max(1, bw/50)) // 20 ms worth at a time
		}
		start := time.Now()
		if _, err := dst.Write(data[:n]); err != nil {
			return false
		}
		data = data[n:]
		if bw > 0 {
			if !sleepUntil(l, start.Add(time.Duration(n)*time.Second/time.Duration(bw))) {
				return false
			}
		}
	}
	return true
}

// sleepUntil waits until t or the end of the link (then it reports false).
func sleepUntil(l *link, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-l.done:
			return false
		default:
			return true
		}
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-l.done:
		return false
	}
}

var _ io.Closer = (*Proxy)(nil)
