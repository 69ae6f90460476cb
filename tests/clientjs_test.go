package tests

import (
	"cmp"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// TestClientJS: the JavaScript client's own tests (clients/js/test, Node's
// built-in runner; no npm install, as the package has no runtime dependency)
// pass against two live gateways over 3 redis-servers, one without API keys
// (REDLOCKD_URL) and one with (REDLOCKD_TESTS_AUTH_URL, REDLOCKD_API_KEY),
// and, for the faults of test/faults.test.js, against two more gateways over
// 3 redis-servers of their own (REDLOCKD_TESTS_FAULT_URLS) whose gateways
// the tests stop and restart, and whose nodes they pause, kill and restart,
// through REDLOCKD_TESTS_FAULTS (see jsFaults); it logs the fault run's line
// (docs/clients.md "JavaScript/TypeScript: `clients/js`").
func TestClientJS(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	node := needTool(t, "node")
	_, g, authed, key := clientGateways(t, "js")
	faults := startJSFaults(t)
	dir := jsDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no clients/js/test/*.test.js (%v)", err)
	}
	// Every file at once: each mostly waits on the gateways (node's default
	// is one file per core but one).
	cmd := exec.Command(node, append([]string{"--test", "--test-reporter=tap", fmt.Sprintf("--test-concurrency=%d", len(files))}, files...)...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "REDLOCKD_URL="+g.URL, "REDLOCKD_TESTS_AUTH_URL="+authed.URL, "REDLOCKD_API_KEY="+key.Key,
		"REDLOCKD_TESTS_FAULT_URLS="+faults.urls(), "REDLOCKD_TESTS_FAULTS="+faults.control.URL)
	out := faults.run(cmd, 8*time.Minute)
	pass := regexp.MustCompile(`(?m)^# pass (\d+)$`).FindSubmatch(out)
	if pass == nil || string(pass[1]) == "0" {
		t.Fatalf("node --test ran no test:\n%s", out)
	}
	if skip := regexp.MustCompile(`(?m)^# skip(?:ped)? (\d+)$`).FindSubmatch(out); skip == nil || string(skip[1]) != "0" {
		t.Fatalf("node --test skipped tests (every one must run here):\n%s", out)
	}
	t.Logf("clients/js: %s tests passed", pass[1])
	if m := regexp.MustCompile(`(?m)fault run: .*$`).Find(out); m != nil {
		t.Log(string(m))
	}
}

// TestClientJSPackage: the tarball of `npm pack` installs into a fresh
// directory as a copy (no symlink into the checkout, which bundlers and zip
// deploys may not follow), holds a lock there from Node, and again with every
// Node-only global removed (process, Buffer, require: an edge-style runtime
// with only fetch); no file of the package imports a `node:` module
// (docs/clients.md "JavaScript/TypeScript: `clients/js`").
func TestClientJSPackage(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	node, npm := needTool(t, "node"), needTool(t, "npm")
	nodes := startCluster(t, 3)
	g := startGateway(t, nodes)

	packDir, app := t.TempDir(), t.TempDir()
	pack := exec.Command(npm, "pack", "--pack-destination", packDir, jsDir(t))
	pack.Dir = packDir
	pack.Env = cleanEnv()
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("npm pack: %v\n%s", err, out)
	}
	tarballs, _ := filepath.Glob(filepath.Join(packDir, "*.tgz"))
	if len(tarballs) != 1 {
		t.Fatalf("npm pack made %v, want one tarball", tarballs)
	}
	if err := os.WriteFile(filepath.Join(app, "package.json"), []byte(`{"name":"app","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	install := exec.Command(npm, "install", "--no-audit", "--no-fund", "--offline", tarballs[0])
	install.Dir = app
	install.Env = cleanEnv()
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", tarballs[0], err, out)
	}
	pkg := filepath.Join(app, "node_modules", "@redlockd", "client")
	if fi, err := os.Lstat(pkg); err != nil || !fi.IsDir() {
		t.Fatalf("%s: %v (mode %v), want a directory, not a symlink", pkg, err, fi)
	}
	for _, want := range []string{"package.json", "README.md", "src/index.js", "src/index.d.ts", "src/schema.d.ts"} {
		if _, err := os.Stat(filepath.Join(pkg, want)); err != nil {
			t.Errorf("the package lacks %s: %v", want, err)
		}
	}
	nodeOnly := regexp.MustCompile(`\bfrom\s+['"]node:|\bimport\s*\(\s*['"]node:|\brequire\s*\(|\bprocess\.|\bBuffer\b`)
	err := filepath.WalkDir(pkg, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".js") {
			return err
		}
		b, err := os.ReadFile(path)
		if m := nodeOnly.Find(b); m != nil {
			t.Errorf("%s uses a Node-only API (%q): the package must run where only fetch is", path, m)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// The smoke program holds a lock of each kind through the installed
	// package, first in plain Node, then with Node's own globals removed.
	smoke := filepath.Join(app, "smoke.mjs")
	if err := os.WriteFile(smoke, []byte(jsSmoke), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, edge := range []string{"", "edge"} {
		cmd := exec.Command(node, "--experimental-vm-modules", "--no-warnings", smoke, g.URL, edge)
		cmd.Dir = app
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "smoke: ok") {
			t.Fatalf("node smoke.mjs %s: %v\n%s", edge, err, out)
		}
	}
}

// jsSmoke is the program TestClientJSPackage runs in the fresh directory:
// it holds a lock of each kind through the installed package, imported by
// Node, or (edge) evaluated as a module in a context of its own whose only
// globals are those of a web runtime: fetch and its classes, timers, crypto,
// performance (no process, Buffer, require or import of another module).
const jsSmoke = `
import vm from 'node:vm';
import { readFileSync } from 'node:fs';
const [url, edge] = process.argv.slice(2);
let api = await import('@redlockd/client');
if (edge) {
  const path = new URL(import.meta.resolve('@redlockd/client'));
  const web = { fetch, Headers, Request, Response, AbortController, AbortSignal, setTimeout, clearTimeout,
    crypto, performance, URL, URLSearchParams, TextEncoder, TextDecoder, console };
  const mod = new vm.SourceTextModule(readFileSync(path, 'utf8'), { context: vm.createContext(web), identifier: path.href });
  await mod.link(() => { throw new Error('the package imports a module'); });
  await mod.evaluate();
  api = mod.namespace;
}
const { Client, LockHeldError } = api;
const c = new Client({ url: ['http://127.0.0.1:1', url] });
const id = Math.random().toString(36).slice(2);
const fences = [
  await c.withLock('smoke-' + id, ({ fencingToken }) => fencingToken, { ttlMs: 2000, waitMs: 5000 }),
  await c.withLock('smoke-' + id, ({ fencingToken }) => fencingToken, { ttlMs: 2000, waitMs: 5000, mode: 'read' }),
  ...await c.withLocks(['smoke-a-' + id, 'smoke-b-' + id], ({ fencingTokens }) => fencingTokens, { ttlMs: 2000, waitMs: 5000 }),
  await c.withPermit('smoke-s-' + id, ({ fencingToken }) => fencingToken, { limit: 2, ttlMs: 2000, waitMs: 5000 }),
];
const busy = await c.acquire('smoke-' + id, { ttlMs: 2000 }).then((l) => c.acquire('smoke-' + id).catch((e) => e));
if (!fences.every((f) => f > 0) || !(busy instanceof LockHeldError) || !busy.requestId) throw new Error('smoke: ' + fences + ' ' + busy);
console.log('smoke: ok' + (edge ? ' (edge)' : ''));
`

// jsDir is the absolute path of clients/js.
func jsDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "clients", "js"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// jsFaults is what the fault tests of clients/js act on: 3 redis-servers
// and two gateways over them, and an HTTP control server through which a
// test asks for a fault: POST /pause?nodes=N (SIGSTOP the first N nodes),
// /resume (every paused node), /kill?node=I and /revive?node=I (SIGKILL node
// I; start it again, empty, on its port), /stop?gateway=I, /start?gateway=I
// and /restart?gateway=I (SIGTERM gateway I; start it again on its address,
// answering once it is ready), /heal (undo every fault still in force). The
// faults are carried out on the test's goroutine by run, which the answer
// waits for.
type jsFaults struct {
	t        *testing.T
	nodes    []*RedisNode
	gateways []*Gateway
	listen   []string // each gateway's --listen, kept across restarts
	stopped  []bool   // by gateway
	paused   []*RedisNode
	control  *httptest.Server
	asks     chan jsFault
}

// jsFault is one request of the control server; done gets its outcome.
type jsFault struct {
	action string
	n      int // the number of nodes, or the index of a node or gateway
	done   chan error
}

func startJSFaults(t *testing.T) *jsFaults {
	t.Helper()
	f := &jsFaults{t: t, nodes: startCluster(t, 3), asks: make(chan jsFault)}
	for range 2 {
		g := startGateway(t, f.nodes)
		f.gateways, f.listen, f.stopped = append(f.gateways, g), append(f.listen, strings.TrimPrefix(g.URL, "http://")), append(f.stopped, false)
	}
	f.control = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		n, err := strconv.Atoi(cmp.Or(q.Get("nodes")+q.Get("node")+q.Get("gateway"), "0"))
		if err != nil || r.Method != http.MethodPost {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		ask := jsFault{action: strings.TrimPrefix(r.URL.Path, "/"), n: n, done: make(chan error, 1)}
		select {
		case f.asks <- ask:
		case <-r.Context().Done():
			return
		}
		select {
		case err := <-ask.done:
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(f.control.Close)
	return f
}

// urls is the gateways' URLs, comma-separated.
func (f *jsFaults) urls() string {
	return f.gateways[0].URL + "," + f.gateways[1].URL
}

// run runs cmd, carrying out the faults it asks for, and returns its output;
// it fails the test if cmd fails or outlives limit (then it is killed).
func (f *jsFaults) run(cmd *exec.Cmd, limit time.Duration) []byte {
	f.t.Helper()
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	timeout := time.After(limit)
	for {
		select {
		case ask := <-f.asks:
			ask.done <- f.carryOut(ask)
		case err := <-exited:
			if err != nil {
				f.t.Fatalf("%s: %v\n%s", cmd, err, out.String())
			}
			return []byte(out.String())
		case <-timeout:
			_ = cmd.Process.Kill()
			<-exited
			f.t.Fatalf("%s: still running after %v:\n%s", cmd, limit, out.String())
		}
	}
}

// carryOut does one fault; it returns an error for a request it cannot do
// (a node or gateway out of range, or not in the state the fault needs).
func (f *jsFaults) carryOut(ask jsFault) error {
	node := ask.n >= 0 && ask.n < len(f.nodes)
	gateway := ask.n >= 0 && ask.n < len(f.gateways)
	switch {
	case ask.action == "pause" && ask.n > 0 && ask.n <= len(f.nodes) && len(f.paused) == 0:
		for _, n := range f.nodes[:ask.n] {
			if n.PID() == 0 {
				return fmt.Errorf("pause: node %s is not running", n.Addr)
			}
		}
		for _, n := range f.nodes[:ask.n] {
			n.Pause()
			f.paused = append(f.paused, n)
		}
	case ask.action == "resume":
		f.resume()
	case ask.action == "kill" && node && !slices.Contains(f.paused, f.nodes[ask.n]):
		f.nodes[ask.n].Kill()
	case ask.action == "revive" && node && f.nodes[ask.n].PID() == 0:
		f.nodes[ask.n].Restart()
	case (ask.action == "stop" || ask.action == "restart") && gateway && !f.stopped[ask.n]:
		f.gateways[ask.n].Stop() // in-flight requests end; new ones find the port closed
		f.stopped[ask.n] = true
		if ask.action == "restart" {
			f.start(ask.n)
		}
	case ask.action == "start" && gateway && f.stopped[ask.n]:
		f.start(ask.n)
	case ask.action == "heal":
		f.resume()
		for _, n := range f.nodes {
			if n.PID() == 0 {
				n.Restart()
			}
		}
		for i, stopped := range f.stopped {
			if stopped {
				f.start(i)
			}
		}
	default:
		return fmt.Errorf("no fault %q with n=%d here", ask.action, ask.n)
	}
	f.t.Logf("clients/js: fault %s %d done", ask.action, ask.n)
	return nil
}

// resume resumes the paused nodes.
func (f *jsFaults) resume() {
	for _, n := range f.paused {
		n.Resume()
	}
	f.paused = nil
}

// start starts the stopped gateway i again on its address.
func (f *jsFaults) start(i int) {
	f.gateways[i] = startGateway(f.t, f.nodes, "--listen", f.listen[i])
	f.stopped[i] = false
}

// clientGateways starts what the tests of a client package run against: 3
// redis-servers, a gateway without API keys and one with an API keys file
// holding key (named and in the namespace name).
func clientGateways(t *testing.T, name string) (nodes []*RedisNode, g, authed *Gateway, key apiKey) {
	t.Helper()
	nodes = startCluster(t, 3)
	g = startGateway(t, nodes)
	key = keygen(t, name, name)
	return nodes, g, startGateway(t, nodes, "--api-keys-file", keysFile(t, key)), key
}
