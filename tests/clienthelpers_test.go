package tests

// Helpers of run_test.go and examples_test.go: child processes whose output
// lines can be awaited, a gate a child blocks on, a journal of critical
// sections, and a proxy that can hold back the gateway's answers.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// proc is a process started by startProc: its stdout lines can be awaited,
// its stderr is kept, and it is killed at cleanup if still running.
type proc struct {
	t        testing.TB
	name     string
	cmd      *exec.Cmd
	out      *syncBuffer   // stdout so far
	errs     *syncBuffer   // stderr so far
	lines    chan string   // stdout lines, in order
	done     chan struct{} // closed when the process exited
	errsDone chan struct{} // closed when its stderr is read to the end
	started  time.Time
	exitedAt time.Time
}

// startProc starts cmd with stdout and stderr captured. cmd.Env, if nil, is
// the test's environment without REDLOCKD_* variables.
func startProc(t testing.TB, cmd *exec.Cmd) *proc {
	t.Helper()
	if cmd.Env == nil {
		cmd.Env = cleanEnv()
	}
	// Plain pipes, read here: cmd.Wait must not wait for a grandchild that
	// outlives the process and keeps its stdout or stderr open.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	er, ew, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{
		t: t, name: filepath.Base(cmd.Path), cmd: cmd, out: &syncBuffer{}, errs: &syncBuffer{},
		lines: make(chan string, 1024), done: make(chan struct{}), errsDone: make(chan struct{}),
	}
	cmd.Stdout, cmd.Stderr = w, ew
	p.started = time.Now()
	err = cmd.Start()
	w.Close() // the child has them
	ew.Close()
	if err != nil {
		r.Close()
		er.Close()
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	go func() {
		_, _ = io.Copy(p.errs, er)
		er.Close()
		close(p.errsDone)
	}()
	go func() {
		// The lines of a process that outlives its readers are dropped, not blocked on.
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.out.WriteString(sc.Text() + "\n")
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		r.Close()
	}()
	go func() {
		_ = cmd.Wait()
		p.exitedAt = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s %q stdout:\n%s\nstderr:\n%s", p.name, cmd.Args[1:], tail(p.out.String(), 30), tail(p.errs.String(), 30))
		}
	})
	return p
}

// runProc starts a redlockd subcommand (e.g. "run") with env added to the
// test's environment minus REDLOCKD_* variables.
func runProc(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(cleanEnv(), env...)
	return startProc(t, cmd)
}

// waitLine waits until the process writes the stdout line want and fails the
// test if it does not within d.
func (p *proc) waitLine(want string, d time.Duration) {
	p.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l := <-p.lines:
			if l == want {
				return
			}
		case <-timeout:
			p.t.Fatalf("%s: no line %q on stdout within %v; stdout:\n%s\nstderr:\n%s", p.name, want, d, p.out.String(), p.errs.String())
		}
	}
}

// waitLinePrefix waits until the process writes a stdout line starting
// with prefix and returns it.
func (p *proc) waitLinePrefix(prefix string, d time.Duration) string {
	p.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			p.t.Fatalf("%s: no line %q... on stdout within %v; stdout:\n%s\nstderr:\n%s", p.name, prefix, d, p.out.String(), p.errs.String())
		}
	}
}

// wait waits for the process to exit and returns its exit status (128+N when
// killed by signal N); it kills it and fails the test if it does not exit
// within d.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%s %q did not exit within %v; stdout:\n%s\nstderr:\n%s", p.name, p.cmd.Args[1:], d, p.out.String(), p.errs.String())
	}
	// What it wrote last is read too, unless a grandchild that outlives it
	// holds its stderr open.
	select {
	case <-p.errsDone:
	case <-time.After(2 * time.Second):
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return p.cmd.ProcessState.ExitCode()
}

// wantExit waits up to d and fails unless the exit status is want.
func (p *proc) wantExit(want int, d time.Duration) {
	p.t.Helper()
	if got := p.wait(d); got != want {
		p.t.Fatalf("%s %q exited %d, want %d; stdout:\n%s\nstderr:\n%s", p.name, p.cmd.Args[1:], got, want, p.out.String(), p.errs.String())
	}
}

// elapsed is how long the process ran (it must have exited).
func (p *proc) elapsed() time.Duration { return p.exitedAt.Sub(p.started) }

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// gate is a FIFO a child blocks on (`read x < "$GATE"`) until open is called.
type gate struct {
	t    testing.TB
	Path string
}

func newGate(t testing.TB) *gate {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return &gate{t: t, Path: path}
}

// open lets the child that reads the gate go on. The child must already be
// blocked on it (or about to be): opening blocks until it reads.
func (g *gate) open() {
	g.t.Helper()
	f, err := os.OpenFile(g.Path, os.O_WRONLY, 0)
	if err != nil {
		g.t.Fatal(err)
	}
	fmt.Fprintln(f, "go")
	f.Close()
}

// checkJournal checks the lines that holders appended to path: each "enter
// ID FENCE" is followed by its "exit ID" before the next enter (no two
// holders inside at once), fences strictly increase, and there are n
// entries. It returns the fences.
func checkJournal(t testing.TB, path string, n int) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("journal: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var fences []int64
	inside := ""
	for i, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "enter":
			if inside != "" {
				t.Fatalf("journal line %d: %s entered while %s was inside:\n%s", i+1, f[1], inside, b)
			}
			inside = f[1]
			fence, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatalf("journal line %d: fence %q: %v", i+1, f[2], err)
			}
			if len(fences) > 0 && fence <= fences[len(fences)-1] {
				t.Fatalf("journal line %d: fence %d after %d, want strictly increasing:\n%s", i+1, fence, fences[len(fences)-1], b)
			}
			fences = append(fences, fence)
		case len(f) == 2 && f[0] == "exit":
			if inside != f[1] {
				t.Fatalf("journal line %d: %s exited but %q was inside:\n%s", i+1, f[1], inside, b)
			}
			inside = ""
		default:
			t.Fatalf("journal line %d: %q is not enter/exit:\n%s", i+1, l, b)
		}
	}
	if inside != "" || len(fences) != n {
		t.Fatalf("journal: %d entries (want %d), %q still inside:\n%s", len(fences), n, inside, b)
	}
	return fences
}

// closedURL returns the URL of a loopback port that nothing listens on.
func closedURL(t testing.TB) string {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// holdProxy is a TCP proxy in front of the gateway. It reports the request
// line of each new connection on Requests, and while Hold is set, the
// connections it accepts never get the gateway's answers (they are read and
// dropped), as when a response is lost on the way.
type holdProxy struct {
	URL      string
	Hold     atomic.Bool
	Requests chan string
	ln       net.Listener
	target   string
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func startHoldProxy(t testing.TB, gatewayURL string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{URL: "http://" + ln.Addr().String(), Requests: make(chan string, 64), ln: ln,
		target: strings.TrimPrefix(gatewayURL, "http://")}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *holdProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *holdProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		hold := p.Hold.Load()
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c)
		p.track(s)
		p.wg.Go(func() {
			defer s.Close()
			br := bufio.NewReader(c)
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case p.Requests <- strings.TrimSpace(line):
			default:
			}
			if _, err := io.WriteString(s, line); err != nil {
				return
			}
			_, _ = io.Copy(s, br)
		})
		p.wg.Go(func() {
			defer c.Close()
			dst := io.Writer(c)
			if hold {
				dst = io.Discard
			}
			_, _ = io.Copy(dst, s)
		})
	}
}

// waitRequest waits for a request line with the given prefix.
func (p *holdProxy) waitRequest(t testing.TB, prefix string, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l := <-p.Requests:
			if strings.HasPrefix(l, prefix) {
				return
			}
		case <-timeout:
			t.Fatalf("proxy: no request %q within %v", prefix, d)
		}
	}
}

// needTool returns the path of a program the tests must run, failing (never
// skipping) when it is missing.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is required by this test (the examples are run, not skipped) but not found in PATH: %v", name, err)
	}
	return p
}

// wantNoFile fails if path exists.
func wantNoFile(t testing.TB, path, why string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %s exists (stat: %v), want no such file", why, path, err)
	}
}
