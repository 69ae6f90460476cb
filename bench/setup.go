package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// lab is what a run measures: 5 nodes and a gateway on them.
type lab struct {
	nodes []string // host:port
	url   string   // the gateway's base URL
	pid   int      // the gateway's process
	stops []func() // kill the processes by PID, the gateway first
}

func (l *lab) close() {
	for _, stop := range l.stops {
		stop()
	}
}

// start starts cmd and returns a channel closed at its end.
func (l *lab) start(cmd *exec.Cmd) (<-chan struct{}, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	l.stops = append([]func(){func() { _ = cmd.Process.Kill(); <-exited }}, l.stops...)
	return exited, nil
}

// setup starts the nodes, then the gateway. lab.close stops them.
func setup(ctx context.Context, c *config) (_ *lab, err error) {
	l := &lab{}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if err := raiseFileLimit(c); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redlockd-bench-")
	if err != nil {
		return nil, err
	}
	l.stops = append(l.stops, func() { os.RemoveAll(dir) })
	for range 5 {
		s, err := redistest.Launch(redistest.Config{Dir: dir})
		if err != nil {
			return nil, err
		}
		l.stops = append([]func(){s.Stop}, l.stops...)
		l.nodes = append(l.nodes, s.Addr())
	}
	bin := c.binary
	if bin == "" {
		bin = filepath.Join(dir, "redlockd")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/redlockd/redlockd/cmd/redlockd").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/redlockd (run bench in the module, or give --redlockd): %v\n%s", err, out)
		}
	}
	port, err := redistest.FreePort()
	if err != nil {
		return nil, err
	}
	l.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	// Long TTLs and waits, and room for the waiters and their connections.
	cmd := exec.Command(bin, "serve", "--listen", strings.TrimPrefix(l.url, "http://"), "--redis", "redis://"+strings.Join(l.nodes, ",redis://"),
		"--restart-quarantine", "off", "--node-timeout", c.nodeTimeout.String(), "--max-ttl", "10m", "--max-wait", "10m",
		"--max-waiters", strconv.Itoa(c.waiters+100), "--max-connections", strconv.Itoa(c.waiters+1000))
	for _, kv := range os.Environ() { // only the flags configure it
		if !strings.HasPrefix(kv, "REDLOCKD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	logPath := filepath.Join(dir, "redlockd.log") // with the access log, a line per request
	if cmd.Stderr, err = os.Create(logPath); err != nil {
		return nil, err
	}
	exited, err := l.start(cmd)
	if err != nil {
		return nil, err
	}
	l.pid = cmd.Process.Pid
	// Ready when a quorum of nodes is reached, which only /readyz tells.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(l.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return l, nil
			}
		}
		select {
		case <-exited:
			deadline = time.Time{} // it will not get ready
		default:
		}
	}
	log, _ := os.ReadFile(logPath)
	return nil, fmt.Errorf("the gateway did not get ready:\n%s", log)
}

// raiseFileLimit raises the soft limit of open files to the hard limit, for
// the waiters' connections. Go raises it for its own process, but gives
// children the limit it started with unless the process sets one itself.
func raiseFileLimit(c *config) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	if need := uint64(c.waiters) + 1000; c.runs("waiters") && rl.Cur < need { // a connection per waiter on each side
		return fmt.Errorf("open files limit %d (ulimit -Hn) is below %d: raise it or lower --waiters", rl.Cur, need)
	}
	return nil
}
