package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/redistest"
)

// ---------------------------------------------------------------------------
// redis-server nodes

// RedisNode is one redis-server process on 127.0.0.1, started by startRedis.
// It is killed by PID when the test ends.
type RedisNode struct {
	t    testing.TB
	Port int
	Addr string // 127.0.0.1:port
	// Password is the requirepass of the node ("" for none).
	Password string
	dir      string

	mu     sync.Mutex
	proc   *redisProc // the running process, nil after Kill
	client *redis.Client
}

// redisProc is one run of redis-server.
type redisProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when cmd.Wait returned
}

// startRedis starts a redis-server on a free port of 127.0.0.1 with nothing
// persisted, waits until it answers PING and kills it (by PID) at cleanup.
func startRedis(t testing.TB) *RedisNode {
	t.Helper()
	return startRedisPassword(t, "")
}

// startRedisPassword is startRedis with requirepass set to password.
func startRedisPassword(t testing.TB, password string) *RedisNode {
	t.Helper()
	n := &RedisNode{t: t, dir: t.TempDir(), Password: password}
	var lastErr error
	for range 10 {
		port, err := redistest.FreePort()
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		p, err := n.spawn(port)
		if err != nil {
			lastErr = err // most likely the port was taken in between: retry
			continue
		}
		n.Port, n.Addr, n.proc = port, fmt.Sprintf("127.0.0.1:%d", port), p
		t.Cleanup(n.cleanup)
		return n
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

// spawn starts redis-server on port and waits until it answers PING. If the
// process exits first (e.g. the port is taken) it returns an error.
func (n *RedisNode) spawn(port int) (*redisProc, error) {
	cmd := exec.Command(redisServerPath,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", n.dir,
	)
	if n.Password != "" {
		cmd.Args = append(cmd.Args, "--requirepass", n.Password)
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &redisProc{cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()

	c := redis.NewClient(&redis.Options{
		Addr: fmt.Sprintf("127.0.0.1:%d", port), Password: n.Password, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, MaxRetries: -1,
	})
	defer c.Close()
	if err := redistest.AwaitOwn(c, cmd, p.done); err != nil {
		return nil, fmt.Errorf("redis-server on port %d: %v: %s", port, err, out.String())
	}
	return p, nil
}

// PID returns the process id of the running redis-server (0 when killed).
func (n *RedisNode) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.cmd.Process.Pid
}

// URL is the node's redis:// URL for --redis.
func (n *RedisNode) URL() string {
	if n.Password != "" {
		return "redis://:" + n.Password + "@" + n.Addr
	}
	return "redis://" + n.Addr
}

// Kill sends SIGKILL to the node's process and waits until it is gone.
func (n *RedisNode) Kill() {
	n.t.Helper()
	n.mu.Lock()
	p := n.proc
	n.proc = nil
	n.mu.Unlock()
	if p == nil {
		n.t.Fatalf("redis %s: Kill: not running", n.Addr)
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Pause stops the process with SIGSTOP: its socket still accepts
// connections but nothing is answered. Cleanup resumes it before killing.
func (n *RedisNode) Pause() { n.t.Helper(); n.signal(syscall.SIGSTOP) }

// Resume continues a paused node with SIGCONT.
func (n *RedisNode) Resume() { n.t.Helper(); n.signal(syscall.SIGCONT) }

func (n *RedisNode) signal(sig syscall.Signal) {
	n.t.Helper()
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		n.t.Fatalf("redis %s: signal %v: not running", n.Addr, sig)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("redis %s: signal %v: %v", n.Addr, sig, err)
	}
}

// Restart kills the node (if running) and starts a fresh, empty redis-server
// on the same port, as after a crash without persistence.
func (n *RedisNode) Restart() {
	n.t.Helper()
	if n.PID() != 0 {
		n.Kill()
	}
	var lastErr error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		p, err := n.spawn(n.Port)
		if err == nil {
			n.mu.Lock()
			n.proc = p
			n.mu.Unlock()
			return
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	n.t.Fatalf("redis %s: restart: %v", n.Addr, lastErr)
}

// Client returns a go-redis client of the node, closed at cleanup. Use it
// only to look at what the gateway left in Redis.
func (n *RedisNode) Client() *redis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.client == nil {
		n.client = redis.NewClient(&redis.Options{
			Addr: n.Addr, Password: n.Password, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		})
	}
	return n.client
}

func (n *RedisNode) cleanup() {
	n.mu.Lock()
	p, c := n.proc, n.client
	n.proc, n.client = nil, nil
	n.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case it is paused
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// startCluster starts n independent redis-server masters.
func startCluster(t testing.TB, n int) []*RedisNode {
	t.Helper()
	return startClusterPassword(t, n, "")
}

// startClusterPassword starts n masters that all require password.
func startClusterPassword(t testing.TB, n int, password string) []*RedisNode {
	t.Helper()
	nodes := make([]*RedisNode, n)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { nodes[i] = startRedisNoFatal(t, password) })
	}
	wg.Wait()
	for i, node := range nodes {
		if node == nil {
			t.Fatalf("node %d did not start", i)
		}
	}
	return nodes
}

// startRedisNoFatal is startRedis for use off the test goroutine: it reports
// a failure with Errorf and returns nil.
func startRedisNoFatal(t testing.TB, password string) (n *RedisNode) {
	defer func() {
		if r := recover(); r != nil && r != errNoFatal {
			panic(r)
		}
	}()
	n = startRedisPassword(&noFatal{TB: t}, password)
	n.t = t // later failures (Kill, Restart, ...) happen on the test goroutine
	return n
}

var errNoFatal = errors.New("fatal")

// noFatal turns Fatalf into Errorf + panic so it can be used off the test
// goroutine (where FailNow is not allowed).
type noFatal struct{ testing.TB }

func (f *noFatal) Fatalf(format string, args ...any) {
	f.TB.Helper()
	f.TB.Errorf(format, args...)
	panic(errNoFatal)
}

// keySnapshot lists every key with its string value (or type) on each live
// node: two snapshots are equal iff no key was created, deleted or rewritten.
func keySnapshot(t testing.TB, nodes []*RedisNode) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for i, n := range nodes {
		if n.PID() == 0 {
			continue
		}
		c := n.Client()
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatalf("node %d: KEYS: %v", i, err)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "redlockd:health" {
				continue // rewritten by every health check
			}
			typ, err := c.Type(ctx, k).Result()
			if err != nil {
				t.Fatalf("node %d: TYPE %s: %v", i, k, err)
			}
			v := typ
			if typ == "string" {
				v, _ = c.Get(ctx, k).Result()
			}
			fmt.Fprintf(&b, "node%d %q=%q\n", i, k, v)
		}
	}
	return b.String()
}

// lockKey is the Redis key of resource's lock (default prefix, no namespace).
func lockKey(resource string) string { return "redlockd:lock:/" + resource }

// holders returns which nodes hold resource's lock key with value token.
func holders(t testing.TB, nodes []*RedisNode, resource, token string) []int {
	t.Helper()
	var out []int
	for i, n := range nodes {
		if n.PID() == 0 {
			continue
		}
		v, err := n.Client().Get(context.Background(), lockKey(resource)).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			t.Fatalf("node %d: GET: %v", i, err)
		}
		if v == token {
			out = append(out, i)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// the gateway

// Gateway is one redlockd serve process.
type Gateway struct {
	t    testing.TB
	URL  string // http://127.0.0.1:port
	cmd  *exec.Cmd
	errs *os.File      // stderr, copied to a file: a load run logs a line per request
	done chan struct{} // closed when the process exited and stderr is drained

	stopped atomic.Bool
}

// startGateway runs `redlockd serve` on a free port of 127.0.0.1 against
// nodes, with restart quarantine off and extraFlags appended (later flags
// win), and waits until it listens and /readyz says ready.
func startGateway(t testing.TB, nodes []*RedisNode, extraFlags ...string) *Gateway {
	t.Helper()
	g := startUnready(t, nodes, extraFlags...)
	g.waitReady(t)
	return g
}

// startUnready is startGateway without waiting for /readyz.
func startUnready(t testing.TB, nodes []*RedisNode, extraFlags ...string) *Gateway {
	t.Helper()
	return startServe(t, strings.Split(redisURLs(nodes), ","), extraFlags...)
}

// redisURLs is the --redis value for nodes: their URLs, comma-separated.
func redisURLs(nodes []*RedisNode) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// startServe runs `redlockd serve` on a free port of 127.0.0.1 against the
// nodes at urls, with restart quarantine off and extraFlags appended (later
// flags win). It does not wait for /readyz.
func startServe(t testing.TB, urls []string, extraFlags ...string) *Gateway {
	t.Helper()
	args := append([]string{"serve",
		"--listen", "127.0.0.1:0",
		"--redis", strings.Join(urls, ","),
		"--restart-quarantine", "off",
	}, extraFlags...)
	return startProcess(t, nil, args...)
}

// startProcess runs the redlockd binary with args and env added to the
// test's environment (minus any REDLOCKD_* variable), and waits for its
// "listening" log line.
func startProcess(t testing.TB, env []string, args ...string) *Gateway {
	t.Helper()
	return startWrapped(t, nil, env, args...)
}

// startWrapped is startProcess with the binary run by the command wrap (e.g.
// a shell that sets limits, then execs it), if any.
func startWrapped(t testing.TB, wrap, env []string, args ...string) *Gateway {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	cmd := exec.Command(binPath, args...)
	if len(wrap) > 0 {
		cmd = exec.Command(wrap[0], append(append(wrap[1:len(wrap):len(wrap)], binPath), args...)...)
	}
	cmd.Env = append(cleanEnv(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redlockd: %v", err)
	}
	errs, err := os.CreateTemp(t.TempDir(), "redlockd-stderr-")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{t: t, cmd: cmd, errs: errs, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		// Lines are scanned until the "listening" one, then copied as
		// they come, so that a load run's access log costs the test
		// process (its load generator) little.
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = errs.WriteString(line + "\n")
			var m struct{ Message, Addr string }
			if strings.Contains(line, `"listening"`) && json.Unmarshal([]byte(line), &m) == nil && m.Message == "listening" && m.Addr != "" {
				addrc <- m.Addr
				break
			}
		}
		_, _ = io.Copy(errs, stderr)
		_ = errs.Close() // Stderr reads it by name
		_ = cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(g.cleanup)

	select {
	case addr := <-addrc:
		g.URL = "http://" + addr
	case <-g.done:
		t.Fatalf("redlockd exited before listening (%v):\n%s", cmd.ProcessState, g.Stderr())
	case <-time.After(15 * time.Second):
		t.Fatalf("redlockd did not log \"listening\" within 15s:\n%s", g.Stderr())
	}

	return g
}

// waitReady polls /readyz until it answers 200: a quorum of nodes reached
// (and connections made), so that the first request of a test on a loaded
// machine does not pay for dialing inside the node timeout.
func (g *Gateway) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := g.try(http.MethodGet, "/readyz", "")
		if err == nil && r.Status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redlockd not ready within 15s (last: %v, %v):\n%s", r, err, g.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanEnv is the test's environment without REDLOCKD_* variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDLOCKD_") {
			env = append(env, kv)
		}
	}
	return env
}

// Stderr returns what the gateway wrote to stderr so far.
func (g *Gateway) Stderr() string {
	b, err := os.ReadFile(g.errs.Name())
	if err != nil {
		return fmt.Sprintf("(cannot read the gateway's stderr: %v)", err)
	}
	return string(b)
}

// Stop sends SIGTERM, waits for the process to exit (and its stderr to be
// drained) and fails the test unless it exited 0 within 10s.
func (g *Gateway) Stop() {
	g.t.Helper()
	if !g.stopped.CompareAndSwap(false, true) {
		return
	}
	start := time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		g.t.Fatalf("SIGTERM redlockd: %v", err)
	}
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
		g.t.Fatalf("redlockd did not exit within 10s of SIGTERM:\n%s", g.Stderr())
	}
	if code := g.cmd.ProcessState.ExitCode(); code != 0 {
		g.t.Fatalf("redlockd exited %d (%v) after SIGTERM, want 0:\n%s", code, g.cmd.ProcessState, g.Stderr())
	}
	g.t.Logf("redlockd stopped in %v", time.Since(start).Round(time.Millisecond))
}

func (g *Gateway) cleanup() {
	if g.stopped.CompareAndSwap(false, true) {
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.done:
		case <-time.After(5 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.done
		}
	}
	if g.t.Failed() {
		g.t.Logf("redlockd stderr:\n%s", tail(g.Stderr(), 40))
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------
// HTTP

var httpClient = &http.Client{Timeout: 30 * time.Second}

// Resp is a response with its body read and, if it is JSON, decoded.
type Resp struct {
	Method, Path string
	Status       int
	Header       http.Header
	Body         []byte
	JSON         map[string]any // nil unless the body is a JSON object
	Elapsed      time.Duration
}

func (r *Resp) String() string {
	return fmt.Sprintf("%s %s → %d %s", r.Method, r.Path, r.Status, r.Body)
}

// send sends req and reads the whole response.
func send(t testing.TB, req *http.Request) *Resp {
	t.Helper()
	r, err := trySend(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// trySend is send for use off the test goroutine.
func trySend(req *http.Request) (*Resp, error) { return sendWith(httpClient, req) }

// sendWith is trySend through c.
func sendWith(c *http.Client, req *http.Request) (*Resp, error) {
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read body: %w", req.Method, req.URL, err)
	}
	r := &Resp{
		Method: req.Method, Path: req.URL.RequestURI(), Status: res.StatusCode, Header: res.Header,
		Body: body, Elapsed: time.Since(start),
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) == nil {
		r.JSON = m
	}
	return r, nil
}

// do sends method path (relative to the gateway) with body; hdr holds
// header name/value pairs, a "" value removes the header. A non-empty body
// is sent as application/json unless hdr says otherwise. Every response
// must carry X-Request-Id.
func (g *Gateway) do(t testing.TB, method, path, body string, hdr ...string) *Resp {
	t.Helper()
	r, err := g.try(method, path, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	if r.Header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s → %d: no X-Request-Id header", method, path, r.Status)
	}
	return r
}

// try is do for use off the test goroutine: it returns errors instead.
func (g *Gateway) try(method, path, body string, hdr ...string) (*Resp, error) {
	req, err := newRequest(g.URL+path, method, body, hdr...)
	if err != nil {
		return nil, err
	}
	return trySend(req)
}

func newRequest(url, method, body string, hdr ...string) (*http.Request, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return nil, fmt.Errorf("new request %s %s: %w", method, url, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if len(hdr)%2 != 0 {
		return nil, fmt.Errorf("odd header list %q", hdr)
	}
	for i := 0; i < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	return req, nil
}

func acquire(t testing.TB, g *Gateway, resource, body string) *Resp {
	t.Helper()
	return g.do(t, http.MethodPost, "/locks/"+resource, body)
}

func release(t testing.TB, g *Gateway, resource, token string) *Resp {
	t.Helper()
	return g.do(t, http.MethodDelete, "/locks/"+resource, "", "Lock-Token", token)
}

func extend(t testing.TB, g *Gateway, resource, token, body string) *Resp {
	t.Helper()
	return g.do(t, http.MethodPatch, "/locks/"+resource, body, "Lock-Token", token)
}

func inspect(t testing.TB, g *Gateway, resource string) *Resp {
	t.Helper()
	return g.do(t, http.MethodGet, "/locks/"+resource, "")
}

// lock acquires resource with body and fails the test unless it got 201.
func lock(t testing.TB, g *Gateway, resource, body string) *Resp {
	t.Helper()
	r := acquire(t, g, resource, body)
	wantStatus(t, r, http.StatusCreated)
	return r
}

// ---------------------------------------------------------------------------
// assertions

func wantStatus(t testing.TB, r *Resp, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("%s %s: status %d, want %d; body: %s", r.Method, r.Path, r.Status, want, r.Body)
	}
}

// wantProblem asserts an RFC 9457 problem of the given status and kind.
func wantProblem(t testing.TB, r *Resp, status int, kind string) {
	t.Helper()
	wantStatus(t, r, status)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s %s: Content-Type %q, want application/problem+json", r.Method, r.Path, ct)
	}
	if r.JSON == nil {
		t.Fatalf("%s %s: body is not a JSON object: %s", r.Method, r.Path, r.Body)
	}
	if got, want := r.str(t, "type"), "urn:redlockd:problem:"+kind; got != want {
		t.Errorf("%s %s: problem type %q, want %q; body: %s", r.Method, r.Path, got, want, r.Body)
	}
	if got := r.num(t, "status"); got != int64(status) {
		t.Errorf("%s %s: problem status %d, want %d", r.Method, r.Path, got, status)
	}
	if r.str(t, "title") == "" {
		t.Errorf("%s %s: problem without title: %s", r.Method, r.Path, r.Body)
	}
	if _, ok := r.JSON["detail"].(string); !ok {
		t.Errorf("%s %s: problem without detail string: %s", r.Method, r.Path, r.Body)
	}
	if s := string(r.Body); strings.Contains(s, "goroutine ") || strings.Contains(s, ".go:") {
		t.Errorf("%s %s: problem body looks like it leaks internals: %s", r.Method, r.Path, r.Body)
	}
}

// str returns the string member key of the JSON body.
func (r *Resp) str(t testing.TB, key string) string {
	t.Helper()
	v, ok := r.JSON[key]
	if !ok {
		t.Fatalf("%s %s: no %q in %s", r.Method, r.Path, key, r.Body)
	}
	s, ok := v.(string)
	if !ok {
		t.Fatalf("%s %s: %q is %T, want string: %s", r.Method, r.Path, key, v, r.Body)
	}
	return s
}

// num returns the integer member key of the JSON body.
func (r *Resp) num(t testing.TB, key string) int64 {
	t.Helper()
	v, ok := r.JSON[key]
	if !ok {
		t.Fatalf("%s %s: no %q in %s", r.Method, r.Path, key, r.Body)
	}
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%s %s: %q is %T, want number: %s", r.Method, r.Path, key, v, r.Body)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatalf("%s %s: %q = %s is not an integer", r.Method, r.Path, key, n)
	}
	return i
}

// retryAfter parses the Retry-After header as whole seconds.
func retryAfter(t testing.TB, r *Resp) int {
	t.Helper()
	h := r.Header.Get("Retry-After")
	if h == "" {
		t.Fatalf("%s %s → %d: no Retry-After header", r.Method, r.Path, r.Status)
	}
	n, err := strconv.Atoi(h)
	if err != nil || n < 0 {
		t.Fatalf("%s %s: Retry-After %q is not whole seconds", r.Method, r.Path, h)
	}
	return n
}

// wantNoSecret fails if secret appears anywhere in r (body or headers).
func wantNoSecret(t testing.TB, r *Resp, secret string) {
	t.Helper()
	if strings.Contains(string(r.Body), secret) {
		t.Errorf("%s %s: body reveals the token: %s", r.Method, r.Path, r.Body)
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			if strings.Contains(v, secret) {
				t.Errorf("%s %s: header %s reveals the token", r.Method, r.Path, k)
			}
		}
	}
}

var seq atomic.Int64

var nameUnsafe = regexp.MustCompile(`[^A-Za-z0-9._:-]+`)

// resourceName returns a resource name unique to this test run.
func resourceName(t testing.TB) string {
	s := nameUnsafe.ReplaceAllString(t.Name(), "-")
	if len(s) > 150 {
		s = s[len(s)-150:]
	}
	return fmt.Sprintf("%s.%d", s, seq.Add(1))
}

// clientToken returns a fresh client-chosen token (22+ chars of [A-Za-z0-9_-]).
func clientToken(t testing.TB) string {
	return fmt.Sprintf("client_%015d-%x", seq.Add(1), time.Now().UnixNano())
}

// eventually polls f every 20ms until it returns true or d passed.
func eventually(t testing.TB, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) WriteString(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ---------------------------------------------------------------------------
// the harness itself

// TestHarness proves the helpers work without the gateway: five servers
// start, answer PING, and Kill/Pause/Resume/Restart act on the right PID.
func TestHarness(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	nodes := startCluster(t, 5)
	t.Logf("5 redis-servers up in %v", time.Since(start).Round(time.Millisecond))
	seen := map[int]bool{}
	for i, n := range nodes {
		if err := n.Client().Ping(ctx).Err(); err != nil {
			t.Fatalf("node %d PING: %v", i, err)
		}
		if seen[n.Port] {
			t.Fatalf("port %d used twice", n.Port)
		}
		seen[n.Port] = true
	}

	// Kill acts on this node only, by PID.
	victim, other := nodes[0], nodes[1]
	pid := victim.PID()
	victim.Kill()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("pid %d still exists after Kill (kill -0: %v)", pid, err)
	}
	dead := redis.NewClient(&redis.Options{Addr: victim.Addr, MaxRetries: -1})
	defer dead.Close()
	if err := dead.Ping(ctx).Err(); err == nil {
		t.Fatal("killed node still answers PING")
	}
	if err := other.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("other node stopped answering after Kill: %v", err)
	}

	// Restart: same port, empty memory.
	n := nodes[2]
	if err := n.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	oldPID := n.PID()
	n.Restart()
	if n.PID() == oldPID {
		t.Fatal("Restart kept the PID")
	}
	if got, err := n.Client().DBSize(ctx).Result(); err != nil || got != 0 {
		t.Fatalf("after Restart: DBSIZE = %d, %v; want 0, nil", got, err)
	}
	victim.Restart()
	if err := victim.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("killed node restarted: PING: %v", err)
	}

	// Pause: no answer within a short timeout; Resume: answers again.
	p := nodes[3]
	p.Pause()
	short := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer short.Close()
	if err := short.Ping(ctx).Err(); err == nil {
		t.Fatal("paused node answered PING")
	}
	p.Resume()
	if err := p.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("resumed node: PING: %v", err)
	}

	// A node left paused is still cleaned up (resumed, then killed).
	nodes[4].Pause()

	single := startRedis(t)
	if err := single.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("single node PING: %v", err)
	}
}
