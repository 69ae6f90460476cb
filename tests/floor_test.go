package tests

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/server"
)

// floorEnv makes the test binary, started again with it set, serve HTTP
// instead of running tests, in a process of its own like the gateway, for
// TestLoad to measure beside the gateway:
//
//   - floorNoop: a trivial handler, what any Go HTTP gateway costs at the
//     least;
//   - floorStack: the gateway's own handler (its fast path, or routing and
//     the generated strict handlers; JSON, access log lines, metrics) over an
//     in-memory locker instead of Redis: what the gateway's HTTP layer costs;
//   - floorBare: a bare handler (no routing, generated code, JSON decoding,
//     access log or metrics) over a redlock.Coordinator with batching,
//     against the nodes in floorNodesEnv: the gateway's Redis side without
//     its HTTP layer, what the gateway would do if that layer cost nothing
//     beyond net/http.
const floorEnv = "REDLOCKD_TESTS_HTTP_FLOOR"

// floorNodesEnv gives floorBare the nodes (comma-separated host:port) and
// floorTimeoutEnv the node timeout.
const (
	floorNodesEnv   = "REDLOCKD_TESTS_FLOOR_NODES"
	floorTimeoutEnv = "REDLOCKD_TESTS_FLOOR_NODE_TIMEOUT"
)

const (
	floorNoop  = "noop"
	floorStack = "stack"
	floorBare  = "bare"
)

// serveFloor listens on a free loopback port, prints its address, and
// answers what the load tool's cycle expects of a gateway (201 with a token
// to a POST, 204 to a DELETE).
func serveFloor(kind string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr())
	h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"token":"floorAAAAAAAAAAAAAAAAAAAAAAAAAA","fencing_token":1}`)
	}))
	switch kind {
	case floorStack:
		// Log lines are made as the gateway makes them, and dropped: the
		// gateway's writer costs it one write per few dozen lines.
		h = server.New(server.Config{Locker: newMemLocker(), Log: zerolog.New(io.Discard).With().Timestamp().Logger(),
			Metrics: server.NewMetrics()}).Handler()
	case floorBare:
		c, err := bareCoordinator()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		h = bareHandler(c)
	}
	err = http.Serve(ln, h)
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// bareCoordinator is a Coordinator with batching over the nodes of
// floorNodesEnv, with the node timeout of floorTimeoutEnv, as the gateway
// under TestLoad makes it.
func bareCoordinator() (*redlock.Coordinator, error) {
	timeout, err := time.ParseDuration(os.Getenv(floorTimeoutEnv))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", floorTimeoutEnv, err)
	}
	var opts []*redis.Options
	for _, addr := range strings.Split(os.Getenv(floorNodesEnv), ",") {
		opts = append(opts, &redis.Options{Addr: addr})
	}
	return redlock.New(opts, redlock.Options{NoQuarantine: true, NodeTimeout: timeout})
}

// bareHandler answers the load tool's cycle with c and nothing else: the
// resource is the rest of the path, the TTL 10s as the load tool asks (the
// body is read and not decoded), the token comes in Lock-Token, and any
// error is a 503 without a body.
func bareHandler(c *redlock.Coordinator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource, ok := strings.CutPrefix(r.URL.Path, "/locks/")
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		switch r.Method {
		case http.MethodPost:
			_, _ = io.Copy(io.Discard, r.Body)
			l, err := c.Acquire(r.Context(), resource, redlock.AcquireOptions{TTL: 10 * time.Second})
			if err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			b := append([]byte(`{"token":"`), l.Token...)
			b = append(b, `","fencing_token":`...)
			b = strconv.AppendInt(b, l.Fence, 10)
			b = append(b, '}', '\n')
			w.Header()["Content-Type"] = []string{"application/json"}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(b)
		case http.MethodDelete:
			if err := c.Release(r.Context(), "", resource, r.Header.Get("Lock-Token")); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	})
}

// memLocker is an in-memory server.Locker for the stack floor: one process,
// a map of tokens, no TTLs (the load tool releases what it takes).
type memLocker struct {
	mu    sync.Mutex
	locks map[string]string // namespace/resource -> token
	fence int64
}

func newMemLocker() *memLocker { return &memLocker{locks: map[string]string{}} }

func (m *memLocker) Acquire(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := o.Namespace + "/" + resource
	if _, held := m.locks[key]; held {
		return redlock.Lock{}, &redlock.HeldError{Remaining: o.TTL}
	}
	tok := o.Token
	if tok == "" {
		tok = redlock.NewToken()
	}
	m.locks[key] = tok
	m.fence++
	now := time.Now()
	return redlock.Lock{Resource: resource, Token: tok, Fence: m.fence, TTL: o.TTL, Validity: o.TTL, Start: now,
		Until: now.Add(o.TTL), Nodes: 5, Quorum: 3, Locked: 5}, nil
}

func (m *memLocker) Release(_ context.Context, namespace, resource, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := namespace + "/" + resource
	switch held, ok := m.locks[key]; {
	case !ok:
		return redlock.ErrLockExpired
	case held != token:
		return redlock.ErrHeldByOther
	}
	delete(m.locks, key)
	return nil
}

func (m *memLocker) Queued(string, string) bool { return false }
func (m *memLocker) Extend(context.Context, string, string, string, time.Duration) (redlock.Lock, error) {
	return redlock.Lock{}, redlock.ErrNotHeld
}
func (m *memLocker) Inspect(context.Context, string, string) (redlock.Info, error) {
	return redlock.Info{}, redlock.ErrNotHeld
}
func (m *memLocker) Status(context.Context) []redlock.NodeStatus { return nil }
func (m *memLocker) Quorum() int                                 { return 3 }
func (m *memLocker) Nodes() int                                  { return 5 }

// startFloor runs a floor server of kind (see floorEnv), with env added to
// its environment, and returns its URL. It is stopped, by PID, when the test
// ends.
func startFloor(t *testing.T, kind string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), floorEnv+"="+kind), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("floor server: %v", err)
	}
	return "http://" + strings.TrimSpace(addr)
}
