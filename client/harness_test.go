package client_test

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run against live gateways: the redlockd binary, built once
// from the repository this module lives in (..), over real redis-server
// processes on free 127.0.0.1 ports, each stopped by PID. The harness uses
// the standard library only, as the client does.

var (
	binPath  string // the redlockd binary
	buildErr error
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "redlockd-client-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "redlockd")
	buildErr = buildGateway(binPath)
	code := m.Run()
	exampleCleanup.run()
	return code
}

// buildGateway compiles ../cmd/redlockd (the module of the repository) as
// tests/ does (no cgo, paths trimmed), so that the two share the build
// cache's packages and the same binary is tested.
func buildGateway(out string) error {
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "redlockd")); err != nil {
		return fmt.Errorf("the redlockd repository is not at %s: %w", root, err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/redlockd")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/redlockd: %w\n%s", err, b)
	}
	return nil
}

// tb is what the harness needs of a test: a *testing.T, or an example's
// background (bg).
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// testNodeTimeout is the node timeout of the tests' gateways: one their
// nodes meet on a loaded machine (no test here is about slow nodes).
const testNodeTimeout = 2 * time.Second

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t tb) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ---------------------------------------------------------------------------
// redis-server nodes

// node is one redis-server process on 127.0.0.1.
type node struct {
	Port int
	dir  string // its working directory
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// startNodes starts n redis-servers at once; cleanup kills them.
func startNodes(t tb, n int) []*node {
	t.Helper()
	nodes, errs := make([]*node, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range nodes {
		dir := t.TempDir()
		wg.Go(func() {
			for range 10 { // another process may take the port first
				if nodes[i], errs[i] = spawnNode(freePortOr0(), dir); errs[i] == nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for i, n := range nodes {
		if errs[i] != nil {
			t.Fatalf("redis-server: %v", errs[i])
		}
		t.Cleanup(n.Kill)
	}
	return nodes
}

func freePortOr0() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// spawnNode runs redis-server on port and waits until it answers as this
// process (and not another test's that took the port).
func spawnNode(port int, dir string) (*node, error) {
	cmd := exec.Command(cmp.Or(os.Getenv("REDIS_SERVER"), "redis-server"), "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n := &node{Port: port, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(n.done) }()
	want := fmt.Sprintf("process_id:%d", cmd.Process.Pid)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-n.done:
			return nil, fmt.Errorf("redis-server on port %d exited: %v", port, cmd.ProcessState)
		default:
		}
		if info, err := n.info(); err == nil && strings.Contains(info, want) {
			return n, nil
		}
	}
	n.Kill()
	return nil, fmt.Errorf("redis-server on port %d did not answer within 15s", port)
}

// info sends INFO server and returns the answer.
func (n *node) info() (string, error) {
	conn, err := net.DialTimeout("tcp", n.addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO: %q, %v", head, err)
	}
	size, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return "", err
	}
	b := make([]byte, size)
	_, err = io.ReadFull(r, b)
	return string(b), err
}

func (n *node) addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// URL is the node's redis:// URL.
func (n *node) URL() string { return "redis://" + n.addr() }

// Pause stops the process (SIGSTOP) until Resume: it keeps its keys and
// connections but answers nothing.
func (n *node) Pause() { _ = n.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume lets a paused process go on (SIGCONT).
func (n *node) Resume() { _ = n.cmd.Process.Signal(syscall.SIGCONT) }

// Kill kills the process and waits until it is gone.
func (n *node) Kill() {
	_ = n.cmd.Process.Kill()
	<-n.done
}

// Restart kills the process if it runs and starts a new redis-server on
// the same port with empty memory, as after a crash without persistence.
func (n *node) Restart(t tb) {
	t.Helper()
	n.Kill()
	deadline := time.Now().Add(15 * time.Second)
	for {
		fresh, err := spawnNode(n.Port, n.dir)
		if err == nil {
			*n = *fresh
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server: restart on port %d: %v", n.Port, err)
		}
		time.Sleep(50 * time.Millisecond) // the port may be held for a moment: no event to await
	}
}

// ---------------------------------------------------------------------------
// gateways

// gateway is a `redlockd serve` process over nodes; URL is where the tests
// reach it (a handler in front of it, if startGateway was given one).
type gateway struct {
	URL   string
	Nodes []*node
	proc  *gatewayProc
}

// startGateway starts n redis-servers and a gateway over them. wrap, if not
// nil, wraps a reverse proxy to the gateway (to put auth, a path prefix or a
// canned answer in front).
func startGateway(t tb, n int, wrap func(http.Handler) http.Handler) *gateway {
	t.Helper()
	nodes := startNodes(t, n)
	g := &gateway{Nodes: nodes, proc: startGatewayProc(t, nodes, 0)}
	g.URL = g.proc.URL
	if wrap != nil {
		target, err := url.Parse(g.proc.URL)
		if err != nil {
			t.Fatalf("%v", err)
		}
		hs := httptest.NewServer(wrap(httputil.NewSingleHostReverseProxy(target)))
		t.Cleanup(hs.Close)
		g.URL = hs.URL
	}
	return g
}

// gatewayProc is one `redlockd serve` process.
type gatewayProc struct {
	URL  string // http://127.0.0.1:port
	port int
	cmd  *exec.Cmd
	errs string        // the file of its stderr
	done chan struct{} // closed when the process has exited
}

// startGatewayProc runs `redlockd serve` over nodes on port (a free one if
// 0), with extra flags after the harness's (later ones win), and waits
// until /readyz says ready; cleanup stops it.
func startGatewayProc(t tb, nodes []*node, port int, extra ...string) *gatewayProc {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.URL()
	}
	for range 10 { // another process may take a free port first
		p := &gatewayProc{port: cmp.Or(port, freePort(t)), done: make(chan struct{})}
		p.URL = "http://127.0.0.1:" + strconv.Itoa(p.port)
		errs, err := os.CreateTemp(t.TempDir(), "redlockd-stderr-")
		if err != nil {
			t.Fatalf("%v", err)
		}
		p.errs = errs.Name()
		p.cmd = exec.Command(binPath, append([]string{"serve", "--listen", "127.0.0.1:" + strconv.Itoa(p.port), "--redis", strings.Join(urls, ","),
			"--restart-quarantine", "off", "--node-timeout", testNodeTimeout.String(), "--log-level", "warn"}, extra...)...)
		p.cmd.Env = cleanEnv()
		p.cmd.Stdout, p.cmd.Stderr = io.Discard, errs
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("start redlockd: %v", err)
		}
		go func() { _ = p.cmd.Wait(); _ = errs.Close(); close(p.done) }()
		if p.waitReady() {
			t.Cleanup(p.Stop)
			return p
		}
		p.Stop()
		if port != 0 {
			t.Fatalf("redlockd on port %d not ready within 15s:\n%s", port, p.stderr())
		}
	}
	t.Fatalf("redlockd did not start on a free port in 10 tries")
	return nil
}

// waitReady polls /readyz until it answers 200; false if the process
// exited or 15s passed.
func (p *gatewayProc) waitReady() bool {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.done:
			return false
		default:
		}
		if res, err := http.Get(p.URL + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return true
			}
		}
	}
	return false
}

// Stop sends SIGTERM and waits until the process has exited (SIGKILL after
// 10s).
func (p *gatewayProc) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *gatewayProc) stderr() string {
	b, _ := os.ReadFile(p.errs)
	return string(b)
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

// ---------------------------------------------------------------------------
// examples

// bg is the tb of examples, which have no *testing.T: Fatalf panics, and
// cleanups run after every test (exampleCleanup.run).
type bg struct {
	mu       sync.Mutex
	cleanups []func()
}

var exampleCleanup = &bg{}

func (*bg) Helper()                           {}
func (*bg) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (b *bg) Cleanup(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cleanups = append(b.cleanups, f)
}

func (b *bg) TempDir() string {
	dir, err := os.MkdirTemp("", "redlockd-example-")
	if err != nil {
		panic(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// run runs the cleanups, last first.
func (b *bg) run() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
	b.cleanups = nil
}
