package redlock

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
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
	cl := newCluster(t, 3, Options{HealthInterval: 20 * time.Millisecond, MaxTTL: shortMaxTTL, DefaultTTL: shortMaxTTL}, true)
	st := cl.c.Status(t.Context())
	for i, s := range st {
		if !s.Up || s.Checked.IsZero() || s.Err != "" || s.Addr != cl.servers[i].Addr() {
			t.Fatalf("node %d right after New: %+v", i, s)
		}
		// Fresh servers: quarantined until max TTL after their start.
		if s.QuarantinedUntil.IsZero() || s.Uptime > shortMaxTTL {
			t.Fatalf("node %d of a fresh cluster: %+v", i, s)
		}
	}

	cl.servers[1].Kill()
	st = waitStatus(t, cl.c, patience, "killed node shown down", func(st []NodeStatus) bool { return !st[1].Up })
	if st[1].Err == "" || !st[0].Up || !st[2].Up {
		t.Fatalf("after killing node 1: %+v", st)
	}

	waitQuarantineOver(t, cl.c, patience)
	restarting := time.Now()
	cl.servers[2].Restart()
	st = waitStatus(t, cl.c, patience, "restarted node quarantined", func(st []NodeStatus) bool {
		return st[2].Up && !st[2].QuarantinedUntil.IsZero()
	})
	// Until max TTL after the new server's start, as its uptime in whole
	// seconds tells.
	if q := st[2].QuarantinedUntil; q.Before(restarting.Add(shortMaxTTL-time.Second)) || q.After(time.Now().Add(shortMaxTTL+time.Second)) {
		t.Fatalf("restarted node quarantined until %v, %v after its restart; want about max TTL (%v)", q, q.Sub(restarting), shortMaxTTL)
	}
	cl.servers[1].Restart()
	waitStatus(t, cl.c, patience, "restarted node shown up", func(st []NodeStatus) bool { return st[1].Up })
}

// TestHealthRequestsUpdateStatus: between two ticks of a slow loop, a failed
// request shows the node down at once. An answered one shows it up again if
// it was down for not answering, but not if it refused (an error reply):
// only a health check, which includes a write, does.
func TestHealthRequestsUpdateStatus(t *testing.T) {
	cl := newCluster(t, 3, Options{HealthInterval: time.Hour})
	if st := cl.c.Status(t.Context()); !st[0].Up {
		t.Fatalf("status %+v", st)
	}
	cl.setDown(1)
	if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.settle()
	st := cl.c.Status(t.Context())
	if st[0].Up || !strings.Contains(st[0].Err, "injected") || !st[1].Up {
		t.Fatalf("after a failed request: %+v", st)
	}
	cl.setDown(0)
	if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.settle()
	if st := cl.c.Status(t.Context()); !st[0].Up || st[0].Err != "" {
		t.Fatalf("after an answered request: %+v", st)
	}

	// Node 0 refuses: the answers between ticks leave it down.
	oom := "OOM command not allowed when used memory > 'maxmemory'."
	cl.hooks[0].refuse.Store(&oom)
	if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.settle()
	if st := cl.c.Status(t.Context()); st[0].Up || !strings.HasPrefix(st[0].Err, "OOM") {
		t.Fatalf("after a refusal: %+v", st)
	}
	cl.hooks[0].refuse.Store(nil)
	if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.settle()
	if _, err := cl.c.Inspect(t.Context(), "", uniq(t)); !errors.Is(err, ErrNotHeld) {
		t.Fatal(err)
	}
	cl.settle()
	if st := cl.c.Status(t.Context()); st[0].Up {
		t.Fatalf("an answer between ticks showed a refusing node up: %+v", st)
	}
	cl.c.nodes[0].check(t.Context())
	if st := cl.c.Status(t.Context()); !st[0].Up || st[0].Err != "" {
		t.Fatalf("after a health check: %+v", st)
	}
}

// replicaMaster starts a server for others to be replicas of: they sync
// at once, and nothing is written in the package's directory.
func replicaMaster(t *testing.T) *redistest.Server {
	return redistest.Start(t, "--repl-diskless-sync-delay", "0", "--dir", t.TempDir())
}

// writeFault is a way to make a node answer PING but refuse writes.
type writeFault struct {
	name  string
	code  string // the Redis error's first word an acquire gets; "" for a timeout
	err   string // in Status
	start func(t *testing.T, s *redistest.Server)
	stop  func(t *testing.T, s *redistest.Server)
}

// writeFaults are READONLY (a replica of another server), OOM (maxmemory
// with noeviction) and CLIENT PAUSE WRITE (a write blocks: a timeout).
func writeFaults(t *testing.T) []writeFault {
	do := func(t *testing.T, s *redistest.Server, args ...any) {
		t.Helper()
		if err := s.Client().Do(t.Context(), args...).Err(); err != nil {
			t.Fatalf("%v on %s: %v", args, s.Addr(), err)
		}
	}
	return []writeFault{
		{name: "READONLY", code: "READONLY", err: errReplica,
			start: func(t *testing.T, s *redistest.Server) {
				m := replicaMaster(t)
				do(t, s, "CONFIG", "SET", "repl-diskless-load", "swapdb") // no copy on disk
				do(t, s, "REPLICAOF", "127.0.0.1", m.Port)
			},
			stop: func(t *testing.T, s *redistest.Server) { do(t, s, "REPLICAOF", "NO", "ONE") }},
		{name: "OOM", code: "OOM", err: "OOM: at maxmemory, refuses writes",
			start: func(t *testing.T, s *redistest.Server) {
				do(t, s, "CONFIG", "SET", "maxmemory-policy", "noeviction")
				do(t, s, "CONFIG", "SET", "maxmemory", "1")
			},
			stop: func(t *testing.T, s *redistest.Server) { do(t, s, "CONFIG", "SET", "maxmemory", "0") }},
		{name: "PAUSE-WRITE", err: "writes get no answer within the node timeout",
			start: func(t *testing.T, s *redistest.Server) { do(t, s, "CLIENT", "PAUSE", 600000, "WRITE") },
			stop:  func(t *testing.T, s *redistest.Server) { do(t, s, "CLIENT", "UNPAUSE") }},
	}
}

// TestHealthWriteRefused: with 3 of 5 nodes refusing writes (READONLY, OOM,
// CLIENT PAUSE WRITE), Status shows them down within a few ticks and keeps
// them down across many ticks while requests run (an answer to a read-only
// command does not bring them up); an acquire's error counts the refusals by
// their Redis error, or the timeouts. Once writes work again the nodes are up
// again; a replica made master again is quarantined for max TTL and does not
// vote meanwhile.
func TestHealthWriteRefused(t *testing.T) {
	redistest.Slow(t)
	const interval = 50 * time.Millisecond
	const maxTTL = shortMaxTTL
	faults := writeFaults(t)
	for _, f := range faults[:2] { // the unbatched path too, where requests report their own replies
		f.name += "-NoBatching"
		faults = append(faults, f)
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			cl := newCluster(t, 5, Options{HealthInterval: interval,
				MaxTTL: maxTTL, DefaultTTL: maxTTL, NoBatching: strings.HasSuffix(f.name, "-NoBatching")}, true)
			waitQuarantineOver(t, cl.c, patience)
			if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
				t.Fatalf("healthy cluster: %v", err)
			}
			bad := func(st []NodeStatus) bool { return !st[0].Up && !st[1].Up && !st[2].Up }
			for _, s := range cl.servers[:3] {
				f.start(t, s)
			}
			waitStatus(t, cl.c, patience, "refusing nodes shown down", func(st []NodeStatus) bool {
				return bad(st) && strings.HasPrefix(st[0].Err, f.err) && strings.HasPrefix(st[1].Err, f.err) && strings.HasPrefix(st[2].Err, f.err)
			})
			// Many ticks, with requests between them: never up.
			for i, end := 0, time.Now().Add(10*interval); i < 3 || time.Now().Before(end); i++ {
				_, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{})
				if !errors.Is(err, ErrQuorumUnavailable) {
					t.Fatalf("acquire with 3 of 5 nodes refusing writes: %v", err)
				}
				u := Explain(err)
				if f.code != "" && (u.Refused[f.code] != 3 || u.Silent != 0) || f.code == "" && (u.Silent != 3 || len(u.Refused) != 0) {
					t.Fatalf("acquire error counted as %+v: %v", u, err)
				}
				_, _ = cl.c.Inspect(t.Context(), "", uniq(t)) // read-only: succeeds on a replica
				if st := cl.c.Status(t.Context()); !bad(st) || !st[3].Up || !st[4].Up {
					t.Fatalf("status flipped while the nodes refuse writes: %+v", st)
				}
			}

			stopping := time.Now()
			for _, s := range cl.servers[:3] {
				f.stop(t, s)
			}
			st := waitStatus(t, cl.c, patience, "nodes up again", func(st []NodeStatus) bool {
				return st[0].Up && st[1].Up && st[2].Up
			})
			up := time.Now()
			if f.code != "READONLY" {
				if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
					t.Fatalf("acquire once writes work again: %v", err)
				}
				return
			}
			// Former replicas: quarantined for max TTL from when they were
			// seen as masters again, and do not vote meanwhile.
			for i, s := range st[:3] {
				if q := s.QuarantinedUntil; q.Before(stopping.Add(maxTTL)) || q.After(up.Add(maxTTL)) {
					t.Fatalf("node %d made master again: quarantined until %v, %v after it was; want max TTL (%v) after a check saw it", i, q, q.Sub(stopping), maxTTL)
				}
			}
			_, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{})
			if u := Explain(err); !errors.Is(err, ErrQuorumUnavailable) || u.Quarantined != 3 {
				t.Fatalf("acquire while the former replicas are quarantined: %+v, %v", u, err)
			}
			waitQuarantineOver(t, cl.c, patience)
			if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
				t.Fatalf("acquire after the quarantine: %v", err)
			}
		})
	}
}

// TestReplicaBetweenTicks: a node made a replica and a master again between
// two health checks is caught by its changed master_replid, and a READONLY
// answer to a request keeps a node from voting until a check sees it as a
// master, which then quarantines it.
func TestReplicaBetweenTicks(t *testing.T) {
	cl := newCluster(t, 3, Options{HealthInterval: time.Hour, MaxTTL: shortMaxTTL, DefaultTTL: shortMaxTTL}, true)
	waitQuarantineOver(t, cl.c, patience)
	m := replicaMaster(t)
	for _, s := range cl.servers[:2] {
		if err := s.Client().ConfigSet(t.Context(), "repl-diskless-load", "swapdb").Err(); err != nil {
			t.Fatal(err) // no copy on disk
		}
	}
	n, s := cl.c.nodes[0], cl.servers[0].Client()
	if err := s.Do(t.Context(), "REPLICAOF", "127.0.0.1", m.Port).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, patience, "the replica synced", func() bool {
		info, err := s.Info(t.Context(), "replication").Result()
		return err == nil && infoField(info, "master_link_status") == "up"
	})
	// A request sees READONLY: the node stops voting at once.
	if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); err != nil {
		t.Fatal(err) // two of three nodes
	}
	cl.settle()
	if !n.quarantined(time.Now()) || cl.c.Status(t.Context())[0].Err != errReplica {
		t.Fatalf("a READONLY answer: quarantined %v, status %+v", n.quarantined(time.Now()), cl.c.Status(t.Context())[0])
	}
	if err := s.Do(t.Context(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	// Writable again, but not a voter until a check has seen it as a master.
	cl.setDown(2)
	if _, err := cl.c.Acquire(t.Context(), uniq(t), AcquireOptions{}); Explain(err).Quarantined != 1 {
		t.Fatalf("former replica voted before a check: %v", err)
	}
	cl.setDown(0)
	n.check(t.Context())
	if st := cl.c.Status(t.Context()); !st[0].Up || st[0].QuarantinedUntil.IsZero() {
		t.Fatalf("after the check: %+v", st[0])
	}

	// Replica and master again between two checks, unseen by requests.
	waitQuarantineOver(t, cl.c, patience)
	n = cl.c.nodes[1]
	s = cl.servers[1].Client()
	n.check(t.Context())
	if err := s.Do(t.Context(), "REPLICAOF", "127.0.0.1", m.Port).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, patience, "the replica synced", func() bool {
		info, err := s.Info(t.Context(), "replication").Result()
		return err == nil && infoField(info, "master_link_status") == "up"
	})
	if err := s.Do(t.Context(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	n.check(t.Context())
	if st := cl.c.Status(t.Context()); !st[1].Up || st[1].QuarantinedUntil.IsZero() {
		t.Fatalf("replica and master again between two checks: %+v", st[1])
	}
}

// TestExplain: the summary of a quorum error counts each node once, by what
// it did.
func TestExplain(t *testing.T) {
	node := func(i int, err error) error { return &NodeError{Node: i, Addr: "x:" + strconv.Itoa(i), Err: err} }
	err := errors.Join(errors.Join(ErrQuorumUnavailable,
		node(0, redisError("READONLY You can't write against a read only replica.")),
		node(1, redisError("OOM command not allowed when used memory > 'maxmemory'.")),
		node(2, redisError("READONLY You can't write against a read only replica.")),
		node(3, context.DeadlineExceeded),
		node(4, errQuarantined),
		node(5, errors.New("dial tcp x:5: connect: connection refused")),
		node(3, context.DeadlineExceeded)), context.Canceled)
	got := Explain(err).Describe(7, 4)
	want := "3 of 7 nodes refused (OOM ×1, READONLY ×2), 1 did not answer in time, 1 could not be reached, 1 in quarantine (not voting yet); quorum is 4"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := Explain(ErrQuorumUnavailable).Describe(5, 3); got != "0 of 5 nodes refused, 0 did not answer in time; quorum is 3" {
		t.Fatalf("no node errors: %q", got)
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
	const nodeTimeout = 4 * testNodeTimeout
	c, err := New([]*redis.Options{s.Options(), {Addr: dead}}, Options{HealthInterval: time.Hour, Quarantine: QuarantineOff, NodeTimeout: nodeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	st := c.Status(t.Context())
	if el := time.Since(start); el >= nodeTimeout/2 {
		t.Errorf("first Status took %v: it waited for the refusing node (node timeout %v)", el, nodeTimeout)
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
	c, err := New([]*redis.Options{o}, Options{HealthInterval: time.Hour, NodeTimeout: testNodeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.Status(t.Context())
	if st[0].Up || !strings.HasPrefix(st[0].Err, "WRONGPASS") || strings.Contains(st[0].Err, "wrong-secret-pw") || strings.Contains(st[0].Err, "the-right-one") {
		t.Fatalf("status %+v, want the WRONGPASS refusal without either password", st)
	}
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
	eventually(t, patience, "the earlier tests' health loops to end", func() bool { return healthLoops() == 0 })
	var nodes []*redis.Options
	for _, s := range servers {
		nodes = append(nodes, s.Options())
	}
	c, err := New(nodes, Options{HealthInterval: 5 * time.Millisecond, NodeTimeout: testNodeTimeout})
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
	eventually(t, patience, "no health loop left after Close", func() bool { return healthLoops() == 0 })
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
	if err := n.noteInfo(info("a", 100), durability{}, t0); err != nil {
		t.Fatal(err)
	}
	if n.until.Load() != 0 {
		t.Fatalf("long-running node quarantined: %v", end())
	}
	// A new process, 1s up as reported: counts 0s, ends maxTTL later.
	_ = n.noteInfo(info("b", 1), durability{}, t0)
	near("new process", maxTTL)
	// Later replies of the same process keep the earliest end they give: 3s
	// later it says 3s up (counts 2s), which would end at 11s: still 10s.
	_ = n.noteInfo(info("b", 3), durability{}, t0.Add(3*time.Second))
	near("same process, looser bound", maxTTL)
	_ = n.noteInfo(info("b", 5), durability{}, t0.Add(3500*time.Millisecond))
	near("same process, tighter bound", 3500*time.Millisecond+maxTTL-4*time.Second)
	// A late reply of the old process changes nothing.
	_ = n.noteInfo(info("a", 100), durability{}, t0.Add(4*time.Second))
	near("stale reply of the old process", 3500*time.Millisecond+maxTTL-4*time.Second)
	// Another restart: the newer process's end wins even when a reply of the
	// older one narrows its own afterwards.
	_ = n.noteInfo(info("c", 0), durability{}, t0.Add(5*time.Second))
	near("newer process", 5*time.Second+maxTTL)
	_ = n.noteInfo(info("b", 9), durability{}, t0.Add(5*time.Second))
	near("older process narrowed", 5*time.Second+maxTTL)
	// Without run_id, nothing is ever shortened.
	m := &node{addr: "y:1", opts: n.opts}
	n = m
	_ = n.noteInfo(info("", 0), durability{}, t0)
	near("no run_id", maxTTL)
	_ = n.noteInfo(info("", 7), durability{}, t0.Add(5500*time.Millisecond))
	near("no run_id, tighter bound ignored", maxTTL)
	if err := n.noteInfo("# Server\r\n", durability{}, t0); err == nil {
		t.Fatal("INFO without uptime accepted")
	}
	// Over: the quarantine ends.
	_ = n.noteInfo(info("", 20), durability{}, t0.Add(20*time.Second))
	if u := n.until.Load(); u > mono(t0.Add(maxTTL)) {
		t.Fatalf("quarantine still ends at %v", end())
	}
	if got := infoField(info("abc", 1), "run_id"); got != "abc" {
		t.Fatalf("runID = %q", got)
	}
}

// delayHook holds every health check (a pipeline that starts with PING)
// for a while: a node that answers, but late.
type delayHook struct{ delay atomic.Int64 }

func (h *delayHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 1 && cmds[0].Name() == "ping" {
			time.Sleep(time.Duration(h.delay.Load()))
		}
		return next(ctx, cmds)
	}
}

// TestSlowNode: a node whose health check answers within the node timeout
// but takes at least half of it is up and slow; once fast again, not slow.
func TestSlowNode(t *testing.T) {
	const nodeTimeout = testNodeTimeout
	cl := newCluster(t, 3, Options{NodeTimeout: nodeTimeout, HealthInterval: time.Hour})
	cl.c.Status(t.Context()) // the health loop's first check is over: this test runs the next ones
	h := &delayHook{}
	n := cl.c.nodes[0]
	n.client.AddHook(h)
	n.hc.Close() // a connection takes the client's hooks when it is made
	n.hc = nil
	h.delay.Store(int64(nodeTimeout/2 + nodeTimeout/20))
	cl.c.nodes[0].check(t.Context())
	if st := cl.c.Status(t.Context()); !st[0].Up || !st[0].Slow || st[1].Slow {
		t.Fatalf("with node 0 answering late: %+v", st)
	}
	h.delay.Store(0)
	cl.c.nodes[0].check(t.Context())
	if st := cl.c.Status(t.Context()); !st[0].Up || st[0].Slow {
		t.Fatalf("with node 0 fast again: %+v", st)
	}
}

// TestNoteInfoDurable: with QuarantineAuto a new process votes at once iff
// it and the process before it keep every acknowledged write; with
// QuarantineOn never; a node that hides CONFIG is not durable.
func TestNoteInfoDurable(t *testing.T) {
	const maxTTL = 10 * time.Second
	info := func(id string) string { return "# Server\r\nrun_id:" + id + "\r\nuptime_in_seconds:1\r\n" }
	always := durability{known: true, appendonly: "yes", appendfsync: "always"}
	everysec := durability{known: true, appendonly: "yes", appendfsync: "everysec"}
	refused := configCmds{}.durability()
	t0 := time.Now()
	for _, tc := range []struct {
		name  string
		mode  Quarantine
		steps []durability // one process each, the last one checked
		want  bool         // the last process is quarantined
	}{
		{"durable, first seen", QuarantineAuto, []durability{always}, false},
		{"durable after durable", QuarantineAuto, []durability{always, always}, false},
		{"everysec", QuarantineAuto, []durability{everysec}, true},
		{"CONFIG refused", QuarantineAuto, []durability{refused}, true},
		{"durable after everysec", QuarantineAuto, []durability{everysec, always}, true},
		{"on", QuarantineOn, []durability{always}, true},
	} {
		n := &node{addr: "x:1", opts: Options{MaxTTL: maxTTL, Quarantine: tc.mode}.withDefaults()}
		for i, d := range tc.steps {
			at := t0.Add(time.Duration(i) * time.Second)
			if err := n.noteInfo(info(strconv.Itoa(i)), d, at); err != nil {
				t.Fatal(err)
			}
			if got := n.quarantined(at); i == len(tc.steps)-1 && got != tc.want {
				t.Errorf("%s: quarantined %v, want %v (%s)", tc.name, got, tc.want, n.quarantineWhy(at))
			}
		}
	}
}

// TestIdentities: the second node to reach a server is an alias, for good.
func TestIdentities(t *testing.T) {
	ids := newIdentities()
	opts := Options{}.withDefaults()
	a, b := &node{idx: 0, addr: "a:1", opts: opts}, &node{idx: 1, addr: "b:1", opts: opts}
	ids.note(a, "r1")
	ids.note(b, "r2")
	ids.note(a, "r3") // a's server restarted
	ids.note(b, "r1") // r1 is free again: b's own restart
	if a.aliasOf.Load() != nil || b.aliasOf.Load() != nil {
		t.Fatal("distinct servers taken for one")
	}
	ids.note(b, "r3")
	if b.aliasOf.Load() != a || !errors.Is(b.aliasErr(), ErrSameServer) || !b.quarantined(time.Now()) {
		t.Fatalf("b reaching a's server: alias of %v, %v", b.aliasOf.Load(), b.aliasErr())
	}
	ids.note(b, "r4")
	if b.aliasOf.Load() != a {
		t.Fatal("an alias voted again after its server changed")
	}
}
