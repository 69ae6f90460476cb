package main

import (
	"encoding/json"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStdLogIsJSON: a line of the standard library's log (zerolog's diode
// reports a collision through it) comes out as a JSON warning of the
// serving process's log, written past the diode.
func TestStdLogIsJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stderr")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Cleanup(func() { log.SetOutput(os.Stderr); log.SetFlags(log.LstdFlags) })
	m := NewMain()
	m.Config.Listen = "127.0.0.1:0"
	m.Config.NodeTimeout = testNodeTimeout
	m.Stderr = f // a file: the buffered output, as a serving process's
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	log.Println("Diode set collision: consider using a larger diode")
	if err := m.Close(); err != nil { // writes every line
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("a line that is not JSON: %q", line)
		}
		if v["message"] == "Diode set collision: consider using a larger diode" && v["level"] == "warn" && v["component"] == "log" {
			return
		}
	}
	t.Fatalf("no JSON warning of the standard log's line in:\n%s", b)
}
