// Package redistest starts real redis-server processes for tests, on free
// loopback ports, and stops them by PID.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary is the redis-server executable, from $REDIS_SERVER or PATH.
func Binary() string {
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		return b
	}
	if b, err := exec.LookPath("redis-server"); err == nil {
		return b
	}
	return "/usr/bin/redis-server"
}

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Port int
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
}

// Start starts a redis-server on a free 127.0.0.1 port with no persistence
// and registers its cleanup. Extra arguments are passed through.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{t: t, args: extra}
	var err error
	for range 5 {
		s.Port, err = FreePort()
		if err != nil {
			continue
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: start redis-server: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Cluster starts n servers.
func Cluster(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	out := make([]*Server, n)
	for i := range out {
		out[i] = Start(t, extra...)
	}
	return out
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"}, s.args...)
	cmd := exec.Command(Binary(), args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done, s.paused = cmd, done, false
	s.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	if err := AwaitOwn(c, cmd, done); err != nil {
		return fmt.Errorf("redis-server on port %d: %w", s.Port, err)
	}
	return nil
}

// AwaitOwn waits until the redis-server that c talks to answers and is the
// process cmd, whose end closes exited. Another server may answer: one of
// another test (packages run in parallel) that took the port between
// FreePort and the bind, or during a restart; cmd then cannot bind. If
// another server answers, cmd exits, or nothing answers within 10s, it
// kills cmd and returns an error.
func AwaitOwn(c *redis.Client, cmd *exec.Cmd, exited <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return errors.New("exited at start")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		pid, err := ProcessID(ctx, c)
		cancel()
		switch {
		case err == nil && pid == cmd.Process.Pid:
			return nil
		case err == nil:
			err = fmt.Errorf("the port is another redis-server's (pid %d)", pid)
		case time.Now().Before(deadline):
			time.Sleep(10 * time.Millisecond) // polling for readiness: no event to await
			continue
		default:
			err = fmt.Errorf("not ready: %w", err)
		}
		_ = cmd.Process.Kill()
		<-exited
		return err
	}
}

// ProcessID returns the process id of the redis-server c talks to. Tests
// that start servers check it: a server that answers on a port is not
// necessarily the one just started there.
func ProcessID(ctx context.Context, c *redis.Client) (int, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server")
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Options returns go-redis options for the server.
func (s *Server) Options() *redis.Options { return &redis.Options{Addr: s.Addr()} }

// Client returns a new client registered for cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Kill sends SIGKILL and waits for the process to end. Safe to call twice.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Pause stops the process (SIGSTOP); it keeps its port and connections.
func (s *Server) Pause() {
	s.signal(syscall.SIGSTOP)
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
}

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() {
	s.signal(syscall.SIGCONT)
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Restart kills the server and starts it again on the same port with empty
// memory (a crash without persistence).
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for range 50 { // the port may linger for a moment
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart on port %d: %v", s.Port, err)
}

// Running reports whether the process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return false
	default:
		return s.cmd != nil
	}
}
