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
// redis-server nodes (internal/redistest)

// RedisNode is a redis-server process on 127.0.0.1, killed by PID when the
// test ends; its address is a field, as the tests read it.
type RedisNode struct {
	*redistest.Server
	Addr string // 127.0.0.1:port
}

func nodesOf(servers ...*redistest.Server) []*RedisNode {
	out := make([]*RedisNode, len(servers))
	for i, s := range servers {
		out[i] = &RedisNode{Server: s, Addr: s.Addr()}
	}
	return out
}

// startRedis starts a redis-server with nothing persisted.
func startRedis(t testing.TB) *RedisNode {
	t.Helper()
	return nodesOf(redistest.Start(t))[0]
}

// startRedisPassword is startRedis with requirepass set to password.
func startRedisPassword(t testing.TB, password string) *RedisNode {
	t.Helper()
	return nodesOf(redistest.StartWith(t, redistest.Config{Password: password}))[0]
}

// startCluster starts n independent redis-server masters.
func startCluster(t testing.TB, n int) []*RedisNode {
	t.Helper()
	return nodesOf(redistest.Cluster(t, n)...)
}

// startClusterPassword starts n masters that all require password.
func startClusterPassword(t testing.TB, n int, password string) []*RedisNode {
	t.Helper()
	return nodesOf(redistest.ClusterWith(t, n, redistest.Config{Password: password})...)
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

// lockHolder is the writer that the lock key key names on c (its record's
// first field, see docs/safety.md, Keys), or "" when nobody does: no key, a
// tombstone ("~") or readers ("^").
func lockHolder(t testing.TB, c *redis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	if h, _, _ := strings.Cut(v, " "); h != "~" && h != "^" {
		return h
	}
	return ""
}

// holders returns which nodes hold resource's lock key with value token.
func holders(t testing.TB, nodes []*RedisNode, resource, token string) []int {
	t.Helper()
	var out []int
	for i, n := range nodes {
		if n.PID() == 0 {
			continue
		}
		if lockHolder(t, n.Client(), lockKey(resource)) == token {
			out = append(out, i)
		}
	}
	return out
}

// waitHolders waits until exactly n live nodes hold resource's lock key with
// token: a round is decided at the quorum, so right after a 201 or 204 the
// slowest nodes may not have the key (or its delete) yet.
func waitHolders(t testing.TB, nodes []*RedisNode, resource, token string, n int) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("the token on %d nodes", n), func() bool {
		return len(holders(t, nodes, resource, token)) == n
	})
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

// gatewayNodeTimeout is the node timeout of every gateway the tests start,
// unless a test passes its own --node-timeout (or REDLOCKD_NODE_TIMEOUT)
// because time or slowness is its subject: seconds, which a healthy node on
// a loaded 2-core machine meets, where the production default (50ms,
// docs/operations.md "TTL, node timeout and drift") would make requests
// fail for the weather.
const gatewayNodeTimeout = 2 * time.Second

// startProcess runs the redlockd binary with args and env added to the
// test's environment (minus any REDLOCKD_* variable), and waits for its
// "listening" log line. A gateway (serve, or dev mode) gets
// gatewayNodeTimeout unless args or env set the node timeout.
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
	if servesLocks(args) {
		// Before the test's env (the last value of a name wins) and under
		// any --node-timeout flag (flags win over the environment).
		cmd.Env = append(append(cleanEnv(), "REDLOCKD_NODE_TIMEOUT="+gatewayNodeTimeout.String()), env...)
	}
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

// readyWithin bounds waitReady. Generous: on a starved machine (the soaks'
// gateways, whose nodes answer through fault proxies with a 100ms node
// timeout, beside the rest of a loaded run) every health check of every
// node once missed its node timeout for more than 15s.
const readyWithin = time.Minute

// servesLocks reports whether the redlockd command line args runs a gateway:
// serve, or dev mode (no subcommand).
func servesLocks(args []string) bool {
	return len(args) == 0 || args[0] == "serve" || strings.HasPrefix(args[0], "-")
}

// waitReady polls /readyz until it answers 200: a quorum of nodes reached
// (and connections made), so that the first request of a test on a loaded
// machine does not pay for dialing inside the node timeout. It waits up to
// readyWithin.
func (g *Gateway) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(readyWithin)
	for {
		r, err := g.try(http.MethodGet, "/readyz", "")
		if err == nil && r.Status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redlockd not ready within %v (last: %v, %v):\n%s", readyWithin, r, err, g.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAllVoting waits until /readyz lists n nodes, none of them in
// quarantine: ready is a quorum voting, and with quarantine on a node
// started less than max TTL ago (a fresh cluster) does not vote yet.
func (g *Gateway) waitAllVoting(t testing.TB, n int, within time.Duration) {
	t.Helper()
	eventually(t, within, "every node votes", func() bool {
		list, _ := g.do(t, http.MethodGet, "/readyz", "").JSON["nodes"].([]any)
		for _, e := range list {
			if m, _ := e.(map[string]any); m["quarantined_until"] != nil {
				return false
			}
		}
		return len(list) == n
	})
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
	r, err := trySend(req)
	if err == nil {
		checkContract(req, body, r)
	}
	return r, err
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

// inspectAnswered is inspect asked again while it answers 503 (for at most
// 10s): on a loaded machine a healthy node may miss a short node timeout, and
// a test that asks whether a lock is free wants the answer, not the weather.
func inspectAnswered(t testing.TB, g *Gateway, resource string) *Resp {
	t.Helper()
	r := inspect(t, g, resource)
	for end := time.Now().Add(10 * time.Second); r.Status == http.StatusServiceUnavailable && time.Now().Before(end); {
		r = inspect(t, g, resource)
	}
	return r
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

// wantCount checks the locked_nodes or held_nodes of r: a round is decided
// at the quorum, so the count is at least the quorum and at most the nodes
// that can vote (up, not paused, not quarantined).
func wantCount(t testing.TB, r *Resp, key string, quorum, voting int64) {
	t.Helper()
	if got := r.num(t, key); got < quorum || got > voting {
		t.Errorf("%s %s: %s %d, want %d to %d (the quorum to the voting nodes)", r.Method, r.Path, key, got, quorum, voting)
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
