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
	"strings"
	"sync"
	"testing"
	"time"

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
//   - floorStack: the gateway's own handler (routing, middleware, the
//     generated strict handlers, JSON, access log lines, metrics) over an
//     in-memory locker instead of Redis: what the gateway's HTTP layer costs.
const floorEnv = "REDLOCKD_TESTS_HTTP_FLOOR"

const (
	floorNoop  = "noop"
	floorStack = "stack"
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
	if kind == floorStack {
		// Log lines are made as the gateway makes them, and dropped: the
		// gateway's writer costs it one write per few dozen lines.
		h = server.New(server.Config{Locker: newMemLocker(), Log: zerolog.New(io.Discard).With().Timestamp().Logger(),
			Metrics: server.NewMetrics()}).Handler()
	}
	err = http.Serve(ln, h)
	fmt.Fprintln(os.Stderr, err)
	return 1
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

// startFloor runs a floor server of kind (see floorEnv) and returns its
// URL. It is stopped, by PID, when the test ends.
func startFloor(t *testing.T, kind string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), floorEnv+"="+kind)
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
