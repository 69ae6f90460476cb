package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/internal/stamp"
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

// TestLogLineTime checks that newLogger's lines carry their time as
// zerolog's Timestamp would, in the same place, in stamp.Layout.
func TestLogLineTime(t *testing.T) {
	var ours, theirs bytes.Buffer
	before := time.Now().Truncate(time.Millisecond)
	l := newLogger(&ours, Config{LogLevel: "info"})
	l.Info().Str("req_id", "r1").Int("status", 201).Msg("request")
	after := time.Now()
	z := zerolog.New(&theirs).With().Timestamp().Logger()
	z.Info().Str("req_id", "r1").Int("status", 201).Msg("request")

	var line struct{ Time string }
	if err := json.Unmarshal(ours.Bytes(), &line); err != nil {
		t.Fatalf("%q: %v", ours.String(), err)
	}
	at, err := time.Parse(stamp.Layout, line.Time)
	if err != nil || stamp.Format(at) != line.Time {
		t.Fatalf("time %q is not in %s (%v)", line.Time, stamp.Layout, err)
	}
	if at.Before(before) || at.After(after) {
		t.Errorf("time %v not within [%v, %v]", at, before, after)
	}
	timeRe := regexp.MustCompile(`"time":"[^"]*"`)
	if o, z := timeRe.ReplaceAllString(ours.String(), `"time":T`), timeRe.ReplaceAllString(theirs.String(), `"time":T`); o != z {
		t.Errorf("line\n%s\nwant, but for the time,\n%s", ours.String(), theirs.String())
	}
}
