package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseBench(t *testing.T) {
	c, err := parseBench([]string{"--url", "http://127.0.0.1:9", "--redis", "redis://127.0.0.1:1,redis://localhost:2", "-c", "1,8", "--duration", "2s", "--contended"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Redis) != 2 || len(c.Concurrency) != 2 || c.Concurrency[1] != 8 || c.Duration != 2*time.Second || !c.Contended || c.ClientProcs != 1 {
		t.Fatalf("config = %+v", c)
	}
	for name, args := range map[string][]string{
		"remote gateway": {"--url", "http://10.1.2.3:8080"},
		"remote node":    {"--redis", "redis://192.168.1.1:6379"},
		"bad c":          {"-c", "0"},
		"bad duration":   {"--duration", "0s"},
		"https":          {"--url", "https://127.0.0.1:8080"},
		"argument":       {"extra"},
		"client procs":   {"--client-procs", "0"},
	} {
		if _, err := parseBench(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if c, err := parseBench([]string{"--client-procs", "3"}, &bytes.Buffer{}); err != nil || c.ClientProcs != 3 {
		t.Errorf("--client-procs 3: %+v, %v", c, err)
	}
	if _, err := parseBench([]string{"--url", "http://10.1.2.3:8080", "--allow-remote"}, &bytes.Buffer{}); err != nil {
		t.Errorf("--allow-remote refused: %v", err)
	}
}

// TestBench runs a short bench of every mode against a dev-mode gateway and
// its embedded nodes.
func TestBench(t *testing.T) {
	m, _ := openDevMain(t, nil)
	runMain(t, m)
	var urls []string
	for _, s := range m.dev.servers {
		urls = append(urls, "redis://"+s.Addr())
	}
	for _, contended := range []string{"", "--contended"} {
		args := []string{"--url", "http://" + m.Addr(), "--redis", strings.Join(urls, ","), "-c", "1,4", "--duration", "200ms"}
		if contended != "" {
			args = append(args, contended)
		}
		var out, errs bytes.Buffer
		if code := runBench(t.Context(), args, &out, &errs); code != exitOK {
			t.Fatalf("bench %v: exit %d: %s", args, code, errs.String())
		}
		for _, want := range []string{"library, naive", "library, batching", "gateway over HTTP", "cycles/s", "p99"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("bench output lacks %q:\n%s", want, out.String())
			}
		}
		// Every mode did cycles (a loaded box may time a few out).
		rows := 0
		for _, line := range strings.Split(out.String(), "\n")[2:] {
			f := strings.Fields(line)
			if len(f) < 10 || !strings.HasSuffix(line, "ms") {
				continue
			}
			rows++
			if f[len(f)-8] == "0" { // cycles
				t.Fatalf("a mode did no cycles:\n%s", out.String())
			}
		}
		if rows != 6 {
			t.Fatalf("%d rows, want 6:\n%s", rows, out.String())
		}
	}
}
