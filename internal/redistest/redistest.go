// Package redistest starts real redis-server processes for the tests of every
// package: on free 127.0.0.1 ports, plain, with a password or an ACL user,
// TLS-only, or with any other arguments. Kill, Pause, Resume and Restart act
// on a server's process by PID, and the test's cleanup kills it.
package redistest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
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

// Binary is the redis-server executable: $REDIS_SERVER, or the one in PATH.
func Binary() string { return cmp.Or(os.Getenv("REDIS_SERVER"), "redis-server") }

// Config says how to start a server; the zero Config is a plain one.
type Config struct {
	Password string // the requirepass or, with User, the user's password
	User     string // an ACL user with every right; the default user is then off
	TLS      *TLS   // if set, the server accepts TLS connections only
	Dir      string // the data directory: a new temporary one if ""
	// Args are more redis-server arguments, after the harness's own (later
	// ones win): nothing is persisted unless they say so.
	Args []string
}

// TLS names the PEM files of a TLS-only server and of the CA clients trust.
type TLS struct{ CertFile, KeyFile, CAFile string }

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	Config
	Port int

	t         testing.TB
	clientTLS *tls.Config // for clients, if Config.TLS is set

	mu     sync.Mutex
	cmd    *exec.Cmd     // the running process, nil after Kill
	done   chan struct{} // closed when cmd has exited
	client *redis.Client
}

// Start starts a plain server with extra arguments.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return ClusterWith(t, 1, Config{Args: extra})[0]
}

// StartWith starts a server configured by c.
func StartWith(t testing.TB, c Config) *Server {
	t.Helper()
	return ClusterWith(t, 1, c)[0]
}

// Cluster starts n plain servers with extra arguments, at once.
func Cluster(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	return ClusterWith(t, n, Config{Args: extra})
}

// ClusterWith starts n servers configured by c at once; cleanup stops them.
func ClusterWith(t testing.TB, n int, c Config) []*Server {
	t.Helper()
	out, errs := make([]*Server, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range out {
		c := c
		c.Dir = cmp.Or(c.Dir, t.TempDir())
		wg.Go(func() {
			if out[i], errs[i] = Launch(c); errs[i] == nil {
				out[i].t = t
				t.Cleanup(out[i].Stop)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("redistest: %v", err)
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

// Launch starts a server outside a test (the bench tool): c.Dir must be
// set, Stop stops it, and Pause, Resume and Restart are not for it.
func Launch(c Config) (*Server, error) {
	s := &Server{Config: c}
	if c.TLS != nil {
		pem, err := os.ReadFile(c.TLS.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem) // without it, spawn fails on the untrusted certificate
		s.clientTLS = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	}
	var err error
	for range 10 { // another process may take the port before the server binds it
		if s.Port, err = FreePort(); err == nil {
			if err = s.spawn(); err == nil {
				o := s.Options()
				o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, time.Second, time.Second
				s.client = redis.NewClient(o)
				return s, nil
			}
		}
	}
	return nil, err
}

// spawn runs redis-server on s.Port and waits until it answers and is this
// process, not another test's that took the port first (packages run in
// parallel). On failure the process is gone and the error has its output.
func (s *Server) spawn() error {
	port := strconv.Itoa(s.Port)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--dir", s.Dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"}
	if s.TLS != nil {
		args[1] = "0"
		args = append(args, "--tls-port", port, "--tls-cert-file", s.TLS.CertFile, "--tls-key-file", s.TLS.KeyFile,
			"--tls-ca-cert-file", s.TLS.CAFile, "--tls-auth-clients", "no")
	}
	switch {
	case s.User != "":
		args = append(args, "--user", "default", "off", "--user", s.User, "on", ">"+s.Password, "~*", "&*", "+@all")
	case s.Password != "":
		args = append(args, "--requirepass", s.Password)
	}
	cmd := exec.Command(Binary(), append(args, s.Args...)...)
	var out bytes.Buffer // read only once the process has exited
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	o := s.Options()
	o.DialTimeout, o.ReadTimeout, o.MaxRetries = 200*time.Millisecond, 200*time.Millisecond, -1
	c := redis.NewClient(o)
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := c.InfoMap(context.Background(), "server").Result()
		switch owner := info["Server"]["process_id"]; {
		case err == nil && owner == strconv.Itoa(cmd.Process.Pid):
			s.mu.Lock()
			s.cmd, s.done = cmd, done
			s.mu.Unlock()
			return nil
		case err == nil:
			err = fmt.Errorf("the port is another redis-server's (pid %q)", owner)
		case time.Now().Before(deadline):
			select {
			case <-done:
				err = errors.New("exited at start")
			case <-time.After(10 * time.Millisecond): // polling for readiness: no event to await
				continue
			}
		default:
			err = fmt.Errorf("not ready: %w", err)
		}
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("redis-server on port %d: %w: %s", s.Port, err, bytes.TrimSpace(out.Bytes()))
	}
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the redis:// (rediss:// with TLS) URL, with the credentials.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr()}
	if s.TLS != nil {
		u.Scheme = "rediss"
	}
	if s.Password != "" {
		u.User = url.UserPassword(s.User, s.Password)
	}
	return u.String()
}

// Options are go-redis options for the server, with credentials and TLS.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr(), Username: s.User, Password: s.Password, TLSConfig: s.clientTLS}
}

// Client is the server's go-redis client, closed by Stop.
func (s *Server) Client() *redis.Client { return s.client }

// PID is the process id of the running redis-server, 0 after Kill.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill sends SIGKILL, if the server runs, and waits until it is gone.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL) // a paused process too
		<-done
	}
}

// Pause stops the process (SIGSTOP): its socket still accepts connections
// but nothing is answered. Resume continues it (SIGCONT).
func (s *Server) Pause() { s.t.Helper(); s.signal(syscall.SIGSTOP) }

func (s *Server) Resume() { s.t.Helper(); s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: %s: %v: not running", s.Addr(), sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %s: %v: %v", s.Addr(), sig, err)
	}
}

// Restart kills the server if it runs and starts a new one on the same
// port with empty memory, as after a crash without persistence.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for err := s.spawn(); err != nil; err = s.spawn() {
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: restart on port %d: %v", s.Port, err)
		}
		time.Sleep(50 * time.Millisecond) // the port may be held for a moment: no event to await
	}
}

// Stop closes the server's client and kills it.
func (s *Server) Stop() {
	_ = s.client.Close()
	s.Kill()
}

// CommandStat is what INFO commandstats tells of one command: how many
// times the server ran it (from a client or inside a script: a script's
// commands count apart from its EVALSHA) and the microseconds they took.
type CommandStat struct {
	Calls int64
	Usec  int64
}

// CommandStats reads INFO commandstats: each command's figures so far, by
// lower-case name ("get", "config|get").
func (s *Server) CommandStats(ctx context.Context) (map[string]CommandStat, error) {
	info, err := s.client.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]CommandStat{}
	for _, l := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(l), "cmdstat_"), ":")
		if !ok || strings.HasPrefix(l, "#") {
			continue
		}
		var st CommandStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.Calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, err = strconv.ParseInt(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("INFO commandstats line %q: %w", l, err)
			}
		}
		out[name] = st
	}
	return out, nil
}
