package main

import (
	"io"
	"sync"
	"time"
)

// logLinger is how long the writer lets lines gather after the first one
// before it writes them: at a few thousand requests per second, one write
// (and one wake-up of the writer) for every few dozen lines instead of one
// per line. A line reaches the output at most this late.
const logLinger = 5 * time.Millisecond

// maxPendingLogs bounds the log bytes waiting to be written; a logger that
// gets ahead of the output by more waits for it.
const maxPendingLogs = 1 << 20

// logWriter writes log lines to w from a goroutine of its own, so that no
// request waits for the write of its access-log line, and lines logged
// within logLinger of each other, or while a write is under way, go out
// together (one write syscall for many requests). Flush waits until everything logged so far
// is written; Close flushes and then writes straight through.
type logWriter struct {
	w    io.Writer
	mu   sync.Mutex
	cond sync.Cond // signalled when a write ends
	// buf is what waits to be written; writing is set while the goroutine
	// writes a previous buf.
	buf     []byte
	writing bool
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

func newLogWriter(w io.Writer) *logWriter {
	l := &logWriter{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
	l.cond.L = &l.mu
	go l.run()
	return l
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.w.Write(p)
	}
	for len(l.buf) >= maxPendingLogs {
		l.cond.Wait()
	}
	l.buf = append(l.buf, p...)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *logWriter) run() {
	defer close(l.done)
	var spare []byte
	for range l.wake {
		time.Sleep(logLinger) // let lines gather
		l.mu.Lock()
		buf := l.buf
		l.buf, l.writing = spare[:0], true
		l.mu.Unlock()
		if len(buf) > 0 {
			_, _ = l.w.Write(buf) // a log line that cannot be written has nowhere to go
		}
		l.mu.Lock()
		spare, l.writing = buf, false
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

// Flush waits until every line written before it is written to w.
func (l *logWriter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for (len(l.buf) > 0 || l.writing) && !l.closed {
		l.cond.Wait()
	}
}

// Close flushes and stops the goroutine; later lines are written straight
// through, in order.
func (l *logWriter) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	for len(l.buf) > 0 || l.writing {
		l.cond.Wait()
	}
	l.closed = true
	close(l.wake)
	l.mu.Unlock()
	<-l.done
}
