package tests

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// TestClientPython: the Python client's unittest suite (clients/python/tests)
// passes, none skipped, against live gateways over three real redis-servers:
// one without API keys and one with an API keys file; its fault run
// (test_faults.py) runs alongside, over three redis-servers of its own, with
// two more gateways that it restarts (on the same port) through pyFaults,
// which also pauses, kills and restarts those nodes (docs/clients.md
// "Python: `clients/python`"). Two processes, because unittest runs one
// test at a time.
func TestClientPython(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	python := needTool(t, "python3")
	dir, err := filepath.Abs(filepath.Join("..", "clients", "python", "tests"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "test_*.py"))
	if err != nil || len(files) < 2 {
		t.Fatalf("clients/python/tests/test_*.py: %v %v", files, err)
	}
	var others []string // every module but the fault run
	for _, f := range files {
		if m := strings.TrimSuffix(filepath.Base(f), ".py"); m != "test_faults" {
			others = append(others, m)
		}
	}
	key := keygen(t, "python", "python")
	keys := keysFile(t, key)
	// suiteEnv is the suite's environment over nodes: a gateway without API
	// keys and one with them.
	suiteEnv := func(nodes []*RedisNode) []string {
		return append(cleanEnv(), "PYTHONPATH="+filepath.Join(dir, "..", "src"), "PYTHONDONTWRITEBYTECODE=1",
			"REDLOCKD_URL="+startGateway(t, nodes).URL, "REDLOCKD_TESTS_AUTH_URL="+startGateway(t, nodes, "--api-keys-file", keys).URL,
			"REDLOCKD_API_KEY="+key.Key, "REDLOCKD_REDIS="+redisURLs(nodes))
	}

	t.Run("faults", func(t *testing.T) {
		t.Parallel()
		nodes := startCluster(t, 3)
		faults := startPyFaults(t, nodes, 2)
		env := append(suiteEnv(nodes), "REDLOCKD_TESTS_GATEWAYS="+strings.Join(faults.urls(), ","), "REDLOCKD_TESTS_FAULTS="+faults.URL)
		runUnittest(t, python, dir, env, faults, "test_faults")
	})
	t.Run("others", func(t *testing.T) {
		t.Parallel()
		runUnittest(t, python, dir, suiteEnv(startCluster(t, 3)), nil, others...)
	})
}

// runUnittest runs `python3 -m unittest` on modules in dir with env,
// carrying out the faults the suite asks faults for (if not nil), and fails
// t unless it passes with every test run, none skipped.
func runUnittest(t *testing.T, python, dir string, env []string, faults *pyFaults, modules ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"-m", "unittest", "-v"}, modules...)...)
	cmd.Dir, cmd.Env = dir, env
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	if faults != nil {
		err = faults.serve(exited)
	} else {
		err = <-exited
	}
	if err != nil {
		t.Fatalf("python3 -m unittest %s: %v\n%s", strings.Join(modules, " "), err, out.String())
	}
	if m := regexp.MustCompile(`(?m)^Ran (\d+) tests?`).FindStringSubmatch(out.String()); m == nil || strings.Contains(out.String(), "skipped") {
		t.Fatalf("python3 -m unittest: no test count or tests skipped:\n%s", out.String())
	} else {
		t.Logf("python3 -m unittest %s: ran %s tests", strings.Join(modules, " "), m[1])
	}
	if m := regexp.MustCompile(`(?m)^fault run: .*$`).FindString(out.String()); m != "" {
		t.Log(m)
	}
}

// TestClientPythonInstall: the package installs with pip into a fresh venv
// with no index (--no-index: its in-tree build backend needs nothing from
// one), from the directory (--no-build-isolation) and from a wheel that pip
// built with that backend (in build isolation), and the installed copy,
// with its py.typed, works against a live gateway and uninstalls cleanly (docs/clients.md
// "Python: `clients/python`", clients/python/README.md).
func TestClientPythonInstall(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	python := needTool(t, "python3")
	g := startGateway(t, startCluster(t, 3))
	src, err := filepath.Abs(filepath.Join("..", "clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir // not the checkout: the import must find the installed copy
		cmd.Env = append(cleanEnv(), "PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1",
			"REDLOCKD_URL="+g.URL)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", filepath.Base(name), args, err, out)
		}
		return string(out)
	}
	// One call, through the hold helper, from the installed package; it
	// prints where it was imported from and whether its py.typed came along.
	const use = `import os, redlockd_client as r
c = r.Client(os.environ["REDLOCKD_URL"])
with c.lock("py-install-" + os.urandom(4).hex(), ttl=5) as held:
    held.check()
    print("fence", held.fencing_token)
print("from", os.path.dirname(r.__file__), "typed", os.path.exists(os.path.join(os.path.dirname(r.__file__), "py.typed")))
`
	wheels := filepath.Join(dir, "wheels")
	for _, tc := range []struct{ name, from string }{{"dir", src}, {"wheel", ""}} {
		venv := filepath.Join(dir, "venv-"+tc.name)
		run(python, "-m", "venv", venv)
		pip := filepath.Join(venv, "bin", "pip")
		from := tc.from
		if from == "" {
			run(pip, "wheel", "--no-index", "--no-deps", "-w", wheels, src) // in build isolation: nothing to install

			found, _ := filepath.Glob(filepath.Join(wheels, "redlockd_client-*-py3-none-any.whl"))
			if len(found) != 1 {
				t.Fatalf("pip wheel: want one redlockd_client-*-py3-none-any.whl in %s, got %v", wheels, found)
			}
			from = found[0]
		}
		run(pip, "install", "--no-index", "--no-build-isolation", from)
		out := run(filepath.Join(venv, "bin", "python"), "-c", use)
		if !regexp.MustCompile(`(?m)^fence \d+$`).MatchString(out) ||
			!strings.Contains(out, "from "+filepath.Join(venv, "lib")) || !strings.Contains(out, "typed True") {
			t.Fatalf("%s: the installed package did not take a lock from its venv with py.typed:\n%s", tc.name, out)
		}
		run(pip, "uninstall", "-y", "redlockd-client") // its RECORD lists what it installed
		if m, _ := filepath.Glob(filepath.Join(venv, "lib", "python*", "site-packages", "redlockd_client*")); len(m) != 0 {
			t.Fatalf("%s: pip uninstall left %v", tc.name, m)
		}
	}
}

// pyFaults are the faults the Python suite asks for over HTTP, carried out
// by the test's goroutine with the harness: restart one of its own gateways
// on the same port, pause, resume, kill or restart redis nodes.
type pyFaults struct {
	t        *testing.T
	URL      string
	nodes    []*RedisNode
	gateways []*Gateway
	listen   []string // each gateway's --listen, kept across restarts
	paused   []*RedisNode
	ops      chan pyFault
}

type pyFault struct {
	op    string
	n     int
	reply chan error
}

// startPyFaults starts n gateways over nodes, each on a port it picks, and the HTTP
// endpoint that takes faults: POST /restart?n=I, /stop?n=I, /start?n=I
// (gateway I, on its port), /pause?n=K (the first K nodes), /resume (every
// paused node), /kill?n=I, /revive?n=I (node I, restarted empty on its port).
func startPyFaults(t *testing.T, nodes []*RedisNode, n int) *pyFaults {
	t.Helper()
	f := &pyFaults{t: t, nodes: nodes, ops: make(chan pyFault)}
	for range n { // restarted on the same ports
		g := startGateway(t, nodes)
		f.gateways, f.listen = append(f.gateways, g), append(f.listen, strings.TrimPrefix(g.URL, "http://"))
	}
	stopped := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("n"))
		op := pyFault{op: strings.Trim(r.URL.Path, "/"), n: i, reply: make(chan error, 1)}
		var err error
		select {
		case f.ops <- op:
			select {
			case err = <-op.reply:
			case <-stopped:
				err = fmt.Errorf("the test ended")
			}
		case <-stopped:
			err = fmt.Errorf("the test ended")
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.URL = "http://" + ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		close(stopped)
		_ = srv.Close()
		for _, n := range f.paused {
			n.Resume()
		}
	})
	return f
}

func (f *pyFaults) urls() []string {
	out := make([]string, len(f.gateways))
	for i, g := range f.gateways {
		out[i] = g.URL
	}
	return out
}

// serve carries out the faults asked for until exited yields the suite's
// outcome, and returns it.
func (f *pyFaults) serve(exited <-chan error) error {
	for {
		select {
		case err := <-exited:
			return err
		case op := <-f.ops:
			op.reply <- f.do(op)
		}
	}
}

func (f *pyFaults) do(op pyFault) error {
	t := f.t
	switch {
	case op.op == "restart" && op.n >= 0 && op.n < len(f.gateways):
		f.gateways[op.n].Stop() // SIGTERM: in-flight requests end, new ones get 503 or a refused connection
		f.gateways[op.n] = startGateway(t, f.nodes, "--listen", f.listen[op.n])
	case op.op == "stop" && op.n >= 0 && op.n < len(f.gateways):
		f.gateways[op.n].Stop()
	case op.op == "start" && op.n >= 0 && op.n < len(f.gateways):
		f.gateways[op.n] = startGateway(t, f.nodes, "--listen", f.listen[op.n])
	case op.op == "pause" && op.n > 0 && op.n <= len(f.nodes):
		for _, n := range f.nodes[:op.n] {
			n.Pause()
			f.paused = append(f.paused, n)
		}
	case op.op == "resume":
		for _, n := range f.paused {
			n.Resume()
		}
		f.paused = nil
	case op.op == "kill" && op.n >= 0 && op.n < len(f.nodes):
		f.nodes[op.n].Kill()
	case op.op == "revive" && op.n >= 0 && op.n < len(f.nodes):
		f.nodes[op.n].Restart()
	default:
		return fmt.Errorf("no fault %q with n=%d", op.op, op.n)
	}
	t.Logf("python suite: fault %s n=%d done", op.op, op.n)
	return nil
}
