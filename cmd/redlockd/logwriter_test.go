package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// gatedWriter records writes; the first one blocks until open is closed.
type gatedWriter struct {
	open    chan struct{}
	mu      sync.Mutex
	out     bytes.Buffer
	writes  int
	started chan struct{}
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	first := g.writes == 0
	g.writes++
	g.mu.Unlock()
	if first {
		close(g.started)
		<-g.open
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.out.Write(p)
}

// TestLogWriter: lines come out in order; a logger does not wait for a
// write under way, and the lines logged meanwhile go out in one write;
// Flush waits for them; after Close, lines are written straight through.
func TestLogWriter(t *testing.T) {
	g := &gatedWriter{open: make(chan struct{}), started: make(chan struct{})}
	l := newLogWriter(g)
	var want strings.Builder
	line := func(i int) {
		s := fmt.Sprintf("line %d\n", i)
		want.WriteString(s)
		if n, err := l.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	line(0)
	<-g.started // the goroutine is stuck writing line 0
	for i := 1; i <= 100; i++ {
		line(i) // must not block
	}
	close(g.open)
	l.Flush()
	g.mu.Lock()
	got, writes := g.out.String(), g.writes
	g.mu.Unlock()
	if got != want.String() {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want.String())
	}
	if writes != 2 {
		t.Errorf("%d writes, want 2 (line 0, then the 100 lines logged meanwhile)", writes)
	}
	l.Close()
	line(101)
	if g.out.String() != want.String() {
		t.Errorf("a line after Close was not written at once")
	}
	l.Close() // twice is fine
}
