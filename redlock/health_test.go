package redlock

import (
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/internal/redistest"
)

// waitStatus polls Status until ok accepts it or limit passes. It sends no
// lock command: what it sees comes from the health loop.
func waitStatus(t *testing.T, c *Coordinator, limit time.Duration, what string, ok func([]NodeStatus) bool) []NodeStatus {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st := c.Status(t.Context())
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; status %+v", what, limit, st)
		}
		time.Sleep(10 * time.Millisecond) // the loop runs on its own clock: nothing to await
	}
}

// TestHealthLoop: Status is right straight after New, and then follows the
// loop without any request: a killed node goes down, a restarted one comes
// back up (and, with quarantine on, is quarantined).
func TestHealthLoop(t *testing.T) {
	cl := newCluster(t, 3, Options{HealthInterval: 20 * time.Millisecond, MaxTTL: 2 * time.Second, DefaultTTL: time.Second}, true)
	st := cl.c.Status(t.Context())
	for i, s := range st {
		if !s.Up || s.Checked.IsZero() || s.Err != "" || s.Addr != cl.servers[i].Addr() {
			t.Fatalf("node %d right after New: %+v", i, s)
		}
		// Fresh servers: quarantined until max TTL after their start.
		if s.QuarantinedUntil.IsZero() || s.Uptime > 2*time.Second {
			t.Fatalf("node %d of a fresh cluster: %+v", i, s)
		}
	}

	cl.servers[1].Kill()
	st = waitStatus(t, cl.c, 5*time.Second, "killed node shown down", func(st []NodeStatus) bool { return !st[1].Up })
	if st[1].Err == "" || !st[0].Up || !st[2].Up {
		t.Fatalf("after killing node 1: %+v", st)
	}
	t.Logf("killed node: %q", st[1].Err)

	waitQuarantineOver(t, cl.c, 5*time.Second)
	cl.servers[2].Restart()
	restarted := time.Now()
	st = waitStatus(t, cl.c, 5*time.Second, "restarted node quarantined", func(st []NodeStatus) bool {
		return st[2].Up && !st[2].QuarantinedUntil.IsZero()
	})
	if q := st[2].QuarantinedUntil; q.Before(restarted.Add(time.Second)) || q.After(restarted.Add(4*time.Second)) {
		t.Fatalf("restarted node quarantined until %v, %v after its restart; want about max TTL (2s)", q, q.Sub(restarted))
	}
	cl.servers[1].Restart()
	waitStatus(t, cl.c, 5*time.Second, "restarted node shown up", func(st []NodeStatus) bool { return st[1].Up })
}

// TestHealthRequestsUpdateStatus: between two ticks of a slow loop, a failed
// request shows the node down at once, and an answered one shows it up.
func TestHealthRequestsUpdateStatus(t *testing.T) {
	cl := newCluster(t, 3, Options{HealthInterval: time.Hour})
	if st := cl.c.Status(t.Context()); !st[0].Up {
		t.Fatalf("status %+v", st)
	}
	cl.setDown(1)
	if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	st := cl.c.Status(t.Context())
	if st[0].Up || !strings.Contains(st[0].Err, "injected") || !st[1].Up {
		t.Fatalf("after a failed request: %+v", st)
	}
	cl.setDown(0)
	if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := cl.c.Status(t.Context()); !st[0].Up || st[0].Err != "" {
		t.Fatalf("after an answered request: %+v", st)
	}
}

// TestStatusUncheckedNode: a node that refuses connections is down in the
// first Status, which answers within about the node timeout.
func TestStatusUncheckedNode(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	s := redistest.Start(t)
	c, err := New([]*redis.Options{s.Options(), {Addr: dead}}, Options{HealthInterval: time.Hour, NoQuarantine: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	st := c.Status(t.Context())
	if el := time.Since(start); el > time.Second {
		t.Errorf("first Status took %v", el)
	}
	if !st[0].Up || st[1].Up || st[1].Err == "" || st[1].Addr != dead {
		t.Fatalf("status %+v", st)
	}
}

// TestStatusErrorHasNoPassword: a node refusing the password says so without
// repeating it.
func TestStatusErrorHasNoPassword(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client()
	if err := admin.ConfigSet(t.Context(), "requirepass", "the-right-one").Err(); err != nil {
		t.Fatal(err)
	}
	o := s.Options()
	o.Password = "wrong-secret-pw"
	c, err := New([]*redis.Options{o}, Options{HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.Status(t.Context())
	if st[0].Up || st[0].Err == "" || strings.Contains(st[0].Err, "wrong-secret-pw") || strings.Contains(st[0].Err, "the-right-one") {
		t.Fatalf("status %+v", st)
	}
	t.Logf("wrong password: %q", st[0].Err)
}

// healthLoops counts the health loop goroutines, started or not (one not yet
// scheduled shows a wrapper function, but the same "created by" line).
func healthLoops() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "created by github.com/redlockd/redlockd/redlock.(*node).startHealth")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestCloseStopsHealthLoops: New starts one loop per node and Close stops
// them all before it returns, also while a node is paused mid-check.
func TestCloseStopsHealthLoops(t *testing.T) {
	servers := redistest.Cluster(t, 3)
	// A goroutine that has closed its done channel may still be on its way
	// out, so the counts are awaited: the earlier tests' loops all end (their
	// coordinators are closed), and so must these three.
	eventually(t, 2*time.Second, "the earlier tests' health loops to end", func() bool { return healthLoops() == 0 })
	var nodes []*redis.Options
	for _, s := range servers {
		nodes = append(nodes, s.Options())
	}
	c, err := New(nodes, Options{HealthInterval: 5 * time.Millisecond, NodeTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := healthLoops(); got != 3 {
		t.Fatalf("%d health loops after New, want 3", got)
	}
	servers[0].Pause()
	defer servers[0].Resume()
	time.Sleep(20 * time.Millisecond) // let a check hang on the paused node
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.nodes {
		select {
		case <-n.loopDone:
		default:
			t.Fatalf("Close returned before node %d's health loop", i)
		}
	}
	eventually(t, 2*time.Second, "no health loop left after Close", func() bool { return healthLoops() == 0 })
}

// TestNoteInfo: the quarantine end from successive INFO replies.
func TestNoteInfo(t *testing.T) {
	const maxTTL = 10 * time.Second
	n := &node{addr: "x:1", opts: Options{MaxTTL: maxTTL}.withDefaults()}
	info := func(id string, up int) string {
		s := "# Server\r\nredis_version:7.2.4\r\n"
		if id != "" {
			s += "run_id:" + id + "\r\n"
		}
		return s + "uptime_in_seconds:" + strconv.Itoa(up) + "\r\n"
	}
	t0 := time.Now()
	end := func() time.Duration { return time.Duration(n.until.Load() - mono(t0)) }
	near := func(what string, want time.Duration) {
		t.Helper()
		if got := end(); got < want-time.Millisecond || got > want+time.Millisecond {
			t.Fatalf("%s: quarantine ends %v after t0, want %v", what, got, want)
		}
	}
	// An old process: no quarantine.
	if err := n.noteInfo(info("a", 100), t0); err != nil {
		t.Fatal(err)
	}
	if n.until.Load() != 0 {
		t.Fatalf("long-running node quarantined: %v", end())
	}
	// A new process, 1s up as reported: counts 0s, ends maxTTL later.
	_ = n.noteInfo(info("b", 1), t0)
	near("new process", maxTTL)
	// Later replies of the same process keep the earliest end they give: 3s
	// later it says 3s up (counts 2s), which would end at 11s: still 10s.
	_ = n.noteInfo(info("b", 3), t0.Add(3*time.Second))
	near("same process, looser bound", maxTTL)
	_ = n.noteInfo(info("b", 5), t0.Add(3500*time.Millisecond))
	near("same process, tighter bound", 3500*time.Millisecond+maxTTL-4*time.Second)
	// A late reply of the old process changes nothing.
	_ = n.noteInfo(info("a", 100), t0.Add(4*time.Second))
	near("stale reply of the old process", 3500*time.Millisecond+maxTTL-4*time.Second)
	// Another restart: the newer process's end wins even when a reply of the
	// older one narrows its own afterwards.
	_ = n.noteInfo(info("c", 0), t0.Add(5*time.Second))
	near("newer process", 5*time.Second+maxTTL)
	_ = n.noteInfo(info("b", 9), t0.Add(5*time.Second))
	near("older process narrowed", 5*time.Second+maxTTL)
	// Without run_id, nothing is ever shortened.
	m := &node{addr: "y:1", opts: n.opts}
	n = m
	_ = n.noteInfo(info("", 0), t0)
	near("no run_id", maxTTL)
	_ = n.noteInfo(info("", 7), t0.Add(5500*time.Millisecond))
	near("no run_id, tighter bound ignored", maxTTL)
	if err := n.noteInfo("# Server\r\n", t0); err == nil {
		t.Fatal("INFO without uptime accepted")
	}
	// Over: the quarantine ends.
	_ = n.noteInfo(info("", 20), t0.Add(20*time.Second))
	if u := n.until.Load(); u > mono(t0.Add(maxTTL)) {
		t.Fatalf("quarantine still ends at %v", end())
	}
	if got := runID(info("abc", 1)); got != "abc" {
		t.Fatalf("runID = %q", got)
	}
}
