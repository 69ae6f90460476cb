package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/fencedfloor"
	"github.com/redlockd/redlockd/internal/redistest"
	"github.com/redlockd/redlockd/redlock"
)

// lab is what a run measures: 5 nodes and a gateway on them.
type lab struct {
	servers     []*redistest.Server
	nodes       []string // host:port
	stops       []func() // kill the processes by PID, the gateway first
	nodeTimeout time.Duration
	dir, bin    string // the temporary directory, the redlockd binary
	maxWaiters  int
	tr          *http.Transport
	// The gateway: its process and address, and its Go client on tr, a
	// net/http transport that keeps a connection per worker or waiter
	// alive; closeConns closes them.
	pid        int
	addr       string
	client     *client.Client
	closeConns func()
	// The GOMAXPROCS it is started with (0: Go's default), and the one it
	// runs at, as its /metrics says.
	procs, threads int
	// A gateway of another build on the same nodes (--baseline-redlockd),
	// nil without one.
	baseline *lab
	// The tool's postgres; nil without one, and then pgSkipped says why.
	pg        *pgServer
	pgSkipped error
	// The instructions of each node's main thread, with --instructions;
	// nil without them, and then noCounters says why.
	counters   []*redistest.Instructions
	noCounters error
}

func (l *lab) close() {
	for _, stop := range l.stops {
		stop()
	}
}

// setup starts the nodes, then the gateway. lab.close stops them.
func setup(ctx context.Context, c *config) (_ *lab, err error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = max(c.c, c.waiters), max(c.c, c.waiters)
	l := &lab{nodeTimeout: c.nodeTimeout, maxWaiters: c.waiters, procs: c.gatewayProcs, tr: tr, closeConns: tr.CloseIdleConnections}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	// A connection per waiter on each side: Go raises the open-files limit
	// of the tool and of the gateway to the hard one, if it is high enough.
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && c.runs("waiters") && rl.Max < uint64(c.waiters)+1000 {
		return nil, fmt.Errorf("open files limit %d (ulimit -Hn) is below %d: raise it or lower --waiters", rl.Max, c.waiters+1000)
	}
	if l.dir, err = os.MkdirTemp("", "redlockd-bench-"); err != nil {
		return nil, err
	}
	l.stops = append(l.stops, func() { os.RemoveAll(l.dir) })
	for range 5 {
		s, err := redistest.Launch(redistest.Config{Dir: l.dir})
		if err != nil {
			return nil, err
		}
		l.stops = slices.Insert(l.stops, 0, s.Stop)
		l.servers, l.nodes = append(l.servers, s), append(l.nodes, s.Addr())
	}
	l.noCounters = errNotCounted
	if c.instructions {
		l.counters, l.noCounters = countInstructions(l.servers)
	}
	l.stops = append(l.stops, func() {
		for _, c := range l.counters {
			c.Close()
		}
	})
	if l.bin = c.binary; l.bin == "" {
		l.bin = filepath.Join(l.dir, "redlockd")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", l.bin, "github.com/redlockd/redlockd/cmd/redlockd").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/redlockd (run bench in the module, or give --redlockd): %v\n%s", err, out)
		}
	}
	stop, err := l.serve(ctx, l.nodes, c.nodeTimeout)
	if err != nil {
		return nil, err
	}
	l.stops = slices.Insert(l.stops, 0, stop)
	if c.baseline != "" {
		b := *l // the same nodes and transport, another gateway
		b.bin = c.baseline
		if stop, err = b.serve(ctx, l.nodes, c.nodeTimeout); err != nil {
			return nil, fmt.Errorf("the baseline gateway: %w", err)
		}
		l.stops, l.baseline = slices.Insert(l.stops, 0, stop), &b
	}
	if c.runs("throughput") || c.runs("contended") {
		l.pg, err = startPostgres(ctx, max(100, c.c+50))
		switch {
		case errors.Is(err, errNoPostgres):
			l.pgSkipped = err
		case err != nil:
			return nil, err
		default:
			l.stops = slices.Insert(l.stops, 0, l.pg.stop)
		}
	}
	return l, nil
}

// spent is what the nodes and the postgres of l, and the HTTP server of
// pid server (0: none), spent so far.
func (l *lab) spent(ctx context.Context, server int) (cost, error) {
	pg := 0
	if l.pg != nil {
		pg = l.pg.pid
	}
	return spent(ctx, l.servers, l.counters, server, pg)
}

// errNotCounted says that a run counts no instructions unless asked.
var errNotCounted = errors.New("not asked (--instructions)")

// countInstructions starts counting the instructions of each node's main
// thread, or of none: a node's figure without the others' compares nothing.
// Only when asked: counting slows the nodes where the hypervisor traps the
// CPU's counters (docs/measuring.md, What a cycle costs the servers).
func countInstructions(nodes []*redistest.Server) ([]*redistest.Instructions, error) {
	var cs []*redistest.Instructions
	for _, s := range nodes {
		c, err := redistest.CountInstructions(s.PID())
		if err != nil {
			for _, c := range cs {
				c.Close()
			}
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// env is the environment of a process that the tool starts as a gateway, or
// in a gateway's place (see bare): only the flags configure a gateway, and
// the Go runtime only GOMAXPROCS, the gateways' (l.procs; 0: Go's default).
func (l *lab) env() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "REDLOCKD_") || strings.HasPrefix(kv, "GOMAXPROCS=")
	})
	if l.procs > 0 {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", l.procs))
	}
	return env
}

// serve starts a gateway on nodes (host:port) with the node timeout d,
// makes it l's gateway once every node is up, and returns how to kill it.
// The gateway picks a free port itself and logs it: a port picked here
// could be another process's by the time the gateway binds it.
func (l *lab) serve(ctx context.Context, nodes []string, d time.Duration) (stop func(), err error) {
	// Long TTLs and waits, and room for the waiters and their connections.
	cmd := exec.Command(l.bin, "serve", "--listen", "127.0.0.1:0", "--redis", "redis://"+strings.Join(nodes, ",redis://"),
		"--restart-quarantine", "off", "--node-timeout", d.String(), "--max-ttl", "10m", "--max-wait", "10m",
		"--max-waiters", strconv.Itoa(l.maxWaiters+100), "--max-connections", strconv.Itoa(l.maxWaiters+1000))
	cmd.Env = l.env()
	logFile, err := os.CreateTemp(l.dir, "redlockd-*.log") // with the access log, a line per request
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the gateway has its own descriptor
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// Never ready once it exited.
	running, exit := context.WithCancel(ctx)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); exit(); close(exited) }()
	stop = func() { _ = cmd.Process.Kill(); <-exited }
	l.pid = cmd.Process.Pid
	if l.addr, err = listening(running, logFile.Name()); err == nil {
		l.client, _ = client.New("http://"+l.addr, client.Options{HTTPClient: &http.Client{Transport: l.tr}}) // fails only on a bad URL
		if err = l.ready(running); err == nil {
			l.threads, err = gomaxprocs(running, l)
		}
	}
	if err != nil {
		stop()
		log, _ := os.ReadFile(logFile.Name())
		return nil, fmt.Errorf("the gateway did not get ready: %v\n%s", err, log)
	}
	return stop, nil
}

// listening returns the address in the gateway's "listening" log line,
// which the log at path has within 15s.
func listening(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for ; ; time.Sleep(20 * time.Millisecond) {
		f, err := os.Open(path)
		if err != nil {
			return "", err
		}
		// The line comes before any request's: a line at a time from the
		// start until it.
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var m struct{ Message, Addr string }
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Message == "listening" && m.Addr != "" {
				f.Close()
				return m.Addr, nil
			}
		}
		f.Close()
		if ctx.Err() != nil {
			return "", fmt.Errorf("no \"listening\" log line: %v", ctx.Err())
		}
	}
}

// ready waits, for 15s at most, until the gateway's /readyz shows every
// node up: only /readyz tells.
func (l *lab) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for ; ; time.Sleep(20 * time.Millisecond) {
		var r api.ReadyResponse
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
		}
		if err == nil && resp.StatusCode == http.StatusOK && !slices.ContainsFunc(r.Nodes, func(n api.NodeStatus) bool { return !n.Up }) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("/readyz: %v: %+v", cmp.Or(err, ctx.Err()), r.Nodes)
		}
	}
}

// The names of the modes, which the floors compare.
const (
	gatewayMode = "gateway over HTTP"
	// A POST and a DELETE to a net/http server that answers at once (see
	// bare): what the HTTP hops of a gateway's cycle cost with no work
	// behind them, against the C=1 floor's allowance.
	bareMode = "bare net/http, no work"
	// The same build's cycle through a gateway of another build on the same
	// nodes (--baseline-redlockd), in turns with the gateway's.
	baselineMode = "baseline gateway over HTTP"
	// SET NX PX and DEL on one node with go-redis in-process: a lock with
	// one Redis and nothing else, and at C=1 two go-redis round trips.
	setNXMode   = "bare SET NX + DEL, 1 Redis"
	redsyncMode = "redsync"
	// redsync at C=1 at the gateway's C=1 rate (a cycle started once per
	// the gateway's mean cycle, the rest slept), so that the nodes idle as
	// long between calls: docs/measuring.md, Proposed targets, says why.
	pacedRedsyncMode = "redsync, at the gateway's C=1 rate"
	// The fenced floor (internal/fencedfloor: the commands a fenced cycle
	// needs, in two scripts with none of the lock's logic) on the 5 nodes,
	// in-process and at the gateway's C=1 rate too.
	pacedFloorMode = "fenced floor scripts, at the gateway's C=1 rate"
	// The stack floor (see stackfloor.go: a bare server answering the
	// gateway's two calls with the fenced floor's scripts, through the
	// gateway's stack with none of its logic), at the gateway's rate in the
	// throughput group, in turns with the gateway's runs.
	stackFloorMode = "stack floor, at the gateway's rate"
	batchingMode   = "library, batching"
	naiveMode      = "library, naive"
	// 16 clients take turns on one lock of the gateway, asking with wait_ms:
	// each takes it, holds it for 1ms, releases it and at once asks again.
	contendedMode = "contended (one lock, hold 1ms, wait_ms)"
	// The least a hand-over of that lock takes here: one client holds for
	// 1ms, then sends a request to a bare server that answers once a round
	// of the fenced floor's acquire script on the 5 nodes has a majority
	// (see bare), and at once holds again.
	handOverFloorMode = "hand-over floor (hold 1ms, a bare server's round of 5 nodes)"
	// Postgres advisory locks through pgx: each worker on a key of its own,
	// and 16 clients on one key, hold 1ms, pg_advisory_lock waiting.
	postgresMode    = "Postgres advisory locks (pgx)"
	pgContendedMode = "Postgres contended (one advisory lock, hold 1ms)"
	// A permit of an idle semaphore of limit 4 through the gateway, beside
	// a lock's cycle; and 32 clients on one semaphore of limit 4, asking
	// with wait_ms, each holding a permit for 2ms.
	permitMode       = "gateway permit (limit 4)"
	semContendedMode = "contended semaphore (limit 4, hold 2ms, wait_ms)"
	// 16 readers and 2 writers on one read-write lock, holding it 1ms and
	// asking with wait_ms; and the same 18 clients all writers.
	rwMode        = "16 readers + 2 writers (one lock, hold 1ms, wait_ms)"
	rwWritersMode = "18 writers (one lock, hold 1ms, wait_ms)"
	// 8 clients, each taking a random pair of 10 locks, holding both 1ms:
	// all at once (POST /locks), or one by one in name order (the classic
	// way to avoid deadlocks), asking with wait_ms.
	multiMode   = "8 clients, random pairs of 10 locks at once (hold 1ms, wait_ms)"
	inOrderMode = "8 clients, random pairs of 10 locks one by one in name order"
)

// locker takes the lock on res and returns how to release it.
type locker func(ctx context.Context, res string) (unlock func(context.Context) error, err error)

// backend is what a mode's cycles go through.
type backend int

const (
	viaGateway     backend = iota // the gateway over HTTP, with the Go client
	viaBareHTTP                   // the bare server: HTTP with no work
	viaBareRound                  // the bare server with a round of the nodes
	viaStackFloor                 // the bare server as the stack floor
	viaRedsync                    // redsync in-process on the nodes
	viaFencedFloor                // the fenced floor's scripts in-process on the nodes
	viaLibrary                    // the redlock library in-process on the nodes
	viaSetNX                      // SET NX and DEL in-process on node 0
	viaPostgres                   // advisory locks of the tool's postgres
)

func (m mode) backend() backend {
	switch m.name {
	case bareMode:
		return viaBareHTTP
	case handOverFloorMode:
		return viaBareRound
	case stackFloorMode:
		return viaStackFloor
	case redsyncMode, pacedRedsyncMode:
		return viaRedsync
	case pacedFloorMode:
		return viaFencedFloor
	case batchingMode, naiveMode:
		return viaLibrary
	case setNXMode:
		return viaSetNX
	case postgresMode, pgContendedMode:
		return viaPostgres
	}
	return viaGateway
}

// viaHTTPServer says whether m's cycles go through an HTTP server: the
// gateway, or a bare server.
func (m mode) viaHTTPServer() bool {
	switch m.backend() {
	case viaGateway, viaBareHTTP, viaBareRound, viaStackFloor:
		return true
	}
	return false
}

// redisNodes is how many of the nodes, the first ones, m's cycles use.
func (m mode) redisNodes(l *lab) int {
	switch m.backend() {
	case viaGateway, viaBareRound, viaStackFloor, viaRedsync, viaFencedFloor, viaLibrary:
		return len(l.nodes)
	case viaSetNX:
		return 1
	}
	return 0
}

// open returns the locker of m, how to close it and the pid of the HTTP
// server its cycles go through (0: none): the gateway over HTTP (permits of
// a semaphore when m has a limit), a bare server, redsync, the redlock
// library or bare SET NX in-process on the same nodes, or Postgres advisory
// locks.
func (l *lab) open(m mode) (locker, func(), int, error) {
	switch m.backend() {
	case viaBareHTTP, viaBareRound, viaStackFloor:
		return l.openBare(m)
	}
	lock, done, err := l.openInProcess(m)
	if m.backend() == viaGateway {
		return lock, done, l.pid, err
	}
	return lock, done, 0, err
}

// openBare starts the bare server of m and returns its locker: the Go
// client's for the stack floor, which answers as the gateway does.
func (l *lab) openBare(m mode) (locker, func(), int, error) {
	hc := &http.Client{Transport: l.tr}
	if m.backend() != viaStackFloor {
		var nodes []string
		if m.backend() == viaBareRound {
			nodes = l.nodes
		}
		lock, p, err := bare(hc, l.env(), nodes)
		if err != nil {
			return nil, nil, 0, err
		}
		return lock, p.stop, p.pid, nil
	}
	p, err := startBare(l.env(), l.nodes, true)
	if err != nil {
		return nil, nil, 0, err
	}
	c, err := client.New(p.url, client.Options{HTTPClient: hc})
	if err != nil {
		p.stop()
		return nil, nil, 0, err
	}
	return gateway(c, client.AcquireOptions{TTL: 10 * time.Second}), func() { l.closeConns(); p.stop() }, p.pid, nil
}

// openInProcess is open for the modes whose cycles no bare server serves.
func (l *lab) openInProcess(m mode) (locker, func(), error) {
	switch {
	case m.limit > 0:
		return permits(l.client, client.PermitOptions{Limit: m.limit, TTL: 10 * time.Second, Wait: m.wait}), l.closeConns, nil
	case m.group == "multi":
		return pairs(l.client, client.AcquireOptions{TTL: 10 * time.Second, Wait: m.wait}, m.name == multiMode), l.closeConns, nil
	case m.backend() == viaGateway:
		return gateway(l.client, client.AcquireOptions{TTL: 10 * time.Second, Wait: m.wait}), l.closeConns, nil
	case m.backend() == viaPostgres:
		cfg, err := pgxpool.ParseConfig(l.pg.dsn)
		if err != nil {
			return nil, nil, err
		}
		cfg.MaxConns = int32(m.c) // a connection per worker, as for the in-process libraries
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err == nil {
			err = warm(pool, m.c)
		}
		if err != nil {
			return nil, nil, err
		}
		return advisory(pool), pool.Close, nil
	}
	// A connection per worker: an in-process library waits for Redis, not for its pool.
	opts := make([]*redis.Options, len(l.nodes))
	for i, addr := range l.nodes {
		opts[i] = &redis.Options{Addr: addr, PoolSize: m.c + 10}
	}
	switch m.backend() {
	case viaSetNX:
		return setNX(redis.NewClient(opts[0]))
	case viaRedsync: // a go-redis client per node, one try per lock
		return redsyncLocker(opts)
	case viaFencedFloor:
		return fencedFloorLocker(opts)
	}
	naive := m.name == naiveMode
	o := redlock.Options{Quarantine: redlock.QuarantineOff, NoBatching: naive, NodeTimeout: l.nodeTimeout}
	var clients []*redis.Client
	if naive {
		// Each worker's command takes a connection of its own, which
		// go-redis dials on first use within the round's node timeout:
		// C workers starting at once on a loaded machine miss it, and the
		// pool then stops dialing for a while (go-redis's guard against
		// dial errors), so that the run measured that instead of the
		// library. The pools dial them first, outside any round, and the
		// run starts once they are in. (With NoBatching the library adds
		// no hook of its own for a ClientHook.)
		for _, opt := range opts {
			opt.MinIdleConns = m.c
		}
		o.ClientHook = func(c *redis.Client) { clients = append(clients, c) }
	}
	lib, err := redlock.New(opts, o)
	if err == nil && naive {
		if err = awaitIdle(clients, m.c); err != nil {
			lib.Close()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, res string) (func(context.Context) error, error) {
		l, err := lib.Acquire(ctx, res, redlock.AcquireOptions{TTL: 10 * time.Second})
		return func(ctx context.Context) error { return lib.Release(ctx, "", res, l.Token) }, err
	}, func() { lib.Close() }, nil
}

// awaitIdle waits, for up to a minute, until each of clients has n idle
// connections in its pool.
func awaitIdle(clients []*redis.Client, n int) error {
	deadline := time.Now().Add(time.Minute)
	for _, c := range clients {
		for c.PoolStats().IdleConns < uint32(n) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %d of %d connections dialed within a minute", c.Options().Addr, c.PoolStats().IdleConns, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// nodeClients is a go-redis client per node of opts, and how to close them.
func nodeClients(opts []*redis.Options) ([]*redis.Client, func()) {
	clients := make([]*redis.Client, len(opts))
	for i, o := range opts {
		clients[i] = redis.NewClient(o)
	}
	return clients, func() {
		for _, c := range clients {
			c.Close()
		}
	}
}

// redsyncLocker locks with redsync on a go-redis client per node of opts,
// one try per lock.
func redsyncLocker(opts []*redis.Options) (locker, func(), error) {
	clients, done := nodeClients(opts)
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	rs := redsync.New(pools...)
	return func(ctx context.Context, res string) (func(context.Context) error, error) {
		mx := rs.NewMutex(res, redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
		return func(ctx context.Context) error {
			if ok, err := mx.UnlockContext(ctx); !ok || err != nil {
				return errors.Join(errors.New("redsync: unlock failed"), err)
			}
			return nil
		}, mx.LockContext(ctx)
	}, done, nil
}

// fencedFloorLocker runs the fenced floor's acquire script on every node of
// opts at once, a goroutine each as redsync does, and its release script
// the same way: the Redis work of a fenced Redlock cycle with none of the
// lock's logic (it checks no quorum: it measures, it does not lock).
func fencedFloorLocker(opts []*redis.Options) (locker, func(), error) {
	clients, done := nodeClients(opts)
	round := func(ctx context.Context, s *redis.Script, keys []string, args ...any) error {
		errs := make([]error, len(clients))
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() { errs[i] = s.Run(ctx, c, keys, args...).Err() })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	return func(ctx context.Context, res string) (func(context.Context) error, error) {
		keys, token := []string{res, res + ":fence"}, strconv.FormatUint(rand.Uint64(), 36)
		return func(ctx context.Context) error {
			return round(ctx, fencedfloor.Release, keys[:1], token, "", 60000)
		}, round(ctx, fencedfloor.Acquire, keys, token, 10000)
	}, done, nil
}

// errSetNXHeld is a bare SET NX's refusal: the key exists.
var errSetNXHeld = errors.New("SET NX: the key exists")

// setNX locks res on rdb's node with SET res token NX PX 10000 and unlocks
// it with DEL: the least a Redis lock can do, a round trip each.
func setNX(rdb *redis.Client) (locker, func(), error) {
	return func(ctx context.Context, res string) (func(context.Context) error, error) {
		unlock := func(ctx context.Context) error { return rdb.Del(ctx, res).Err() }
		ok, err := rdb.SetNX(ctx, res, strconv.FormatUint(rand.Uint64(), 36), 10*time.Second).Result()
		if err == nil && !ok {
			err = errSetNXHeld
		}
		return unlock, err
	}, func() { rdb.Close() }, nil
}

// gateway locks through the gateway with o.
func gateway(c *client.Client, o client.AcquireOptions) locker {
	return func(ctx context.Context, res string) (func(context.Context) error, error) {
		l, err := c.Acquire(ctx, res, o)
		return func(ctx context.Context) error { return c.Release(ctx, res, l.Token) }, err
	}
}

// pairs locks the resources named in res, separated by commas and in name
// order, through the gateway with o: all at once, or one by one.
func pairs(c *client.Client, o client.AcquireOptions, atOnce bool) locker {
	return func(ctx context.Context, res string) (func(context.Context) error, error) {
		rs := strings.Split(res, ",")
		if atOnce {
			m, err := c.AcquireMulti(ctx, rs, o)
			return func(ctx context.Context) error { return c.ReleaseMulti(ctx, rs, m.Token) }, err
		}
		var held []client.Lock
		unlock := func(ctx context.Context) error {
			var errs []error
			for _, l := range slices.Backward(held) {
				errs = append(errs, c.Release(ctx, l.Resource, l.Token))
			}
			return errors.Join(errs...)
		}
		for _, r := range rs {
			l, err := c.Acquire(ctx, r, o)
			if err != nil {
				_ = unlock(context.WithoutCancel(ctx))
				return unlock, err
			}
			held = append(held, l)
		}
		return unlock, nil
	}
}

// permits takes a permit of the semaphore named res through the gateway with o.
func permits(c *client.Client, o client.PermitOptions) locker {
	return func(ctx context.Context, res string) (func(context.Context) error, error) {
		p, err := c.AcquirePermit(ctx, res, o)
		return func(ctx context.Context) error { return c.ReleasePermit(ctx, res, p.Token) }, err
	}
}
