package main

import (
	"bufio"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog/diode"
)

// The process's log output (see newLogOutput). logLines is how many lines
// the diode holds waiting for the writer; logInterval is how often the
// writer looks for lines when it found none, and how often what it buffered
// is written; logBufferBytes is the most buffered between two writes.
const (
	logLines       = 16384
	logInterval    = 50 * time.Millisecond
	logBufferBytes = 64 << 10
)

// logOutput is the log output of a serving process: a line logged goes into
// a zerolog diode, a ring of logLines lines, without waiting, and one
// goroutine takes the lines from it and writes them in a few large writes
// (a buffer written every logInterval or when full) rather than a write
// per line. If the lines come faster than the output takes them, the
// diode drops the oldest not yet written, which dropped counts. Close
// writes every line logged before it.
type logOutput struct {
	diode   diode.Writer
	flush   *flusher
	dropped atomic.Uint64
}

// newLogOutput returns the log output to w.
func newLogOutput(w io.Writer) *logOutput {
	o := &logOutput{flush: newFlusher(w)}
	o.diode = diode.NewWriter(o.flush, logLines, logInterval, func(missed int) { o.dropped.Add(uint64(missed)) })
	return o
}

func (o *logOutput) Write(p []byte) (int, error) { return o.diode.Write(p) }

// Direct is a writer of whole lines to the output past the diode, for the
// standard library's log: the diode reports a collision through it, and
// would otherwise be handed that line while it fails to take another.
func (o *logOutput) Direct() io.Writer { return o.flush }

// Dropped is how many lines the output dropped so far.
func (o *logOutput) Dropped() uint64 { return o.dropped.Load() }

// Close writes the lines logged so far, and stops the output: lines logged
// after it are lost.
func (o *logOutput) Close() error { return o.diode.Close() } // closes the flusher after the last line

// flusher buffers what the diode's goroutine writes, and writes it to w
// every logInterval and once closed.
type flusher struct {
	mu   sync.Mutex
	w    *bufio.Writer
	stop chan struct{}
	done chan struct{}
}

func newFlusher(w io.Writer) *flusher {
	f := &flusher{w: bufio.NewWriterSize(w, logBufferBytes), stop: make(chan struct{}), done: make(chan struct{})}
	go f.loop()
	return f
}

func (f *flusher) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Write(p)
}

func (f *flusher) loop() {
	defer close(f.done)
	t := time.NewTicker(logInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f.mu.Lock()
			_ = f.w.Flush()
			f.mu.Unlock()
		case <-f.stop:
			return
		}
	}
}

// Close writes what is buffered and stops the ticker; it leaves w open.
func (f *flusher) Close() error {
	close(f.stop)
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Flush()
}

// bufferedOutput reports whether logs to w go through a logOutput: those to
// a file (the process's stderr: a file, a pipe or a terminal); a writer of
// the caller's (a test's) gets each line as it is logged.
func bufferedOutput(w io.Writer) bool {
	_, ok := w.(*os.File)
	return ok
}
