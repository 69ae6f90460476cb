package tests

import (
	"context"
	"fmt"
	"io"
	"log"
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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/redlockd/redlockd/internal/redistest"
)

// The exit statuses of `redlockd run`
// (docs/clients.md "`redlockd run` (shell scripts, cron jobs)").
const (
	runUsage       = 64
	runUnavailable = 69
	runLockHeld    = 75
	runLockLost    = 76
)

// TestRun: `redlockd run` holds a lock around CMD: CMD's exit status is
// run's, CMD gets the lock's variables, the lock is extended while CMD runs
// and released when it exits, signals are forwarded, a held lock is 75 and
// a bad flag or URL 64 (docs/clients.md "`redlockd run` (shell scripts, cron
// jobs)"). It runs the built binary against a gateway over three
// redis-servers.
func TestRun(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	g := startGateway(t, startCluster(t, 3))
	run := func(t *testing.T, env []string, args ...string) *proc {
		t.Helper()
		return runProc(t, env, append([]string{"run", "--url", g.URL}, args...)...)
	}
	wantFree := func(t *testing.T, res string) {
		t.Helper()
		wantNotHeld(t, inspectAnswered(t, g, res))
	}

	// CMD's exit status is run's, and the lock is released after it.
	t.Run("ExitStatus", func(t *testing.T) {
		for script, want := range map[string]int{"exit 0": 0, "exit 7": 7, "kill -KILL $$": 128 + 9} {
			res := resourceName(t)
			run(t, nil, "--resource", res, "--", "sh", "-c", script).wantExit(want, 30*time.Second)
			wantFree(t, res)
		}
	})

	// A base URL that names no route of the gateway (a wrong proxy
	// prefix) is a usage error, not "unavailable": retrying cannot help.
	t.Run("WrongURL", func(t *testing.T) {
		res := resourceName(t)
		p := runProc(t, nil, "run", "--url", g.URL+"/v1", "--resource", res, "--wait", "5s", "--", "true")
		p.wantExit(64, 10*time.Second)
		if msg := p.errs.String(); !strings.Contains(msg, "check --url") {
			t.Errorf("stderr %q does not say to check --url", msg)
		}
		wantFree(t, res)
	})

	t.Run("CommandNotFound", func(t *testing.T) {
		res := resourceName(t)
		p := run(t, nil, "--resource", res, "--", "/nonexistent/command")
		p.wantExit(127, 30*time.Second)
		wantFree(t, res)
	})

	// CMD gets the resource, a token that holds the lock (it can extend it)
	// and the fencing token; run never prints the token.
	t.Run("ChildEnv", func(t *testing.T) {
		res, gt := resourceName(t), newGate(t)
		tokenFile := filepath.Join(t.TempDir(), "token")
		p := run(t, []string{"GATE=" + gt.Path, "TOKEN_FILE=" + tokenFile},
			"--resource", res, "--owner", "nightly@test", "--", "sh", "-c", `
				printf '%s' "$REDLOCKD_TOKEN" > "$TOKEN_FILE"
				echo "resource=$REDLOCKD_RESOURCE"
				echo "fence=$REDLOCKD_FENCING_TOKEN"
				echo "url=$REDLOCKD_URL"
				echo ready
				read x < "$GATE"`)
		p.waitLine("ready", 30*time.Second)
		out := p.out.String()
		info := inspect(t, g, res)
		wantStatus(t, info, http.StatusOK)
		fence := info.num(t, "fencing_token")
		for _, want := range []string{"resource=" + res, fmt.Sprintf("fence=%d", fence), "url=" + g.URL} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("CMD's output %q lacks %q", out, want)
			}
		}
		if owner := info.str(t, "owner"); owner != "nightly@test" {
			t.Errorf("owner %q, want nightly@test", owner)
		}
		token, err := os.ReadFile(tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		r := extend(t, g, res, string(token), `{"ttl_ms":30000}`)
		wantStatus(t, r, http.StatusOK)
		if got := r.num(t, "fencing_token"); got != fence {
			t.Errorf("extend with CMD's token: fence %d, want %d", got, fence)
		}
		gt.open()
		p.wantExit(0, 30*time.Second)
		wantFree(t, res)
		if s := p.out.String() + p.errs.String(); strings.Contains(s, string(token)) {
			t.Errorf("run printed the token:\n%s", s)
		}
	})

	// With the lock held and no wait, CMD never runs: 75.
	t.Run("FailIfLocked", func(t *testing.T) {
		res := resourceName(t)
		held := lock(t, g, res, `{"ttl_ms":30000}`)
		marker := filepath.Join(t.TempDir(), "ran")
		p := run(t, nil, "--resource", res, "--fail-if-locked", "--", "touch", marker)
		p.wantExit(runLockHeld, 30*time.Second)
		wantNoFile(t, marker, "--fail-if-locked with the lock held")
		if !strings.Contains(p.errs.String(), "held by another owner") {
			t.Errorf("stderr %q does not say the lock is held", p.errs.String())
		}

		p = run(t, nil, "--resource", res, "--wait", "1s", "--", "touch", marker)
		p.wantExit(runLockHeld, 30*time.Second)
		wantNoFile(t, marker, "--wait 1s with the lock held")
		if p.elapsed() < 900*time.Millisecond {
			t.Errorf("--wait 1s gave up after %v", p.elapsed())
		}
		if got, want := inspect(t, g, res).num(t, "fencing_token"), held.num(t, "fencing_token"); got != want {
			t.Errorf("the holder's lock changed: fence %d, want %d", got, want)
		}
		wantStatus(t, release(t, g, res, held.str(t, "token")), http.StatusNoContent)
	})

	// run waits for a lock held by another until it expires. The wait
	// (2.5s) is longer than run's own TTL (1s): the lock is still held
	// throughout CMD.
	t.Run("Wait", func(t *testing.T) {
		res, gt := resourceName(t), newGate(t)
		held := lock(t, g, res, `{"ttl_ms":2500}`)
		p := run(t, []string{"GATE=" + gt.Path}, "--resource", res, "--ttl", "1s", "--wait", "20s", "--", "sh", "-c",
			`echo "fence=$REDLOCKD_FENCING_TOKEN"; echo ready; read x < "$GATE"`)
		p.waitLine("ready", 30*time.Second)
		first, _, _ := strings.Cut(p.out.String(), "\n")
		fence, err := strconv.ParseInt(strings.TrimPrefix(first, "fence="), 10, 64)
		if err != nil || fence <= held.num(t, "fencing_token") {
			t.Errorf("CMD saw %q, want a fence above the first holder's %d", first, held.num(t, "fencing_token"))
		}
		wantHeldFor(t, g, res, fence, 2*time.Second)
		gt.open()
		p.wantExit(0, 30*time.Second)
		wantFree(t, res)
	})

	// Two `run --read` hold the lock at once, with the last writer's fence;
	// a `run` (a writer) waits for both, keeping new readers out meanwhile,
	// and runs with a greater fence once they are gone.
	t.Run("Read", func(t *testing.T) {
		res := resourceName(t)
		w0 := lock(t, g, res, `{"ttl_ms":30000}`)
		wantStatus(t, release(t, g, res, w0.str(t, "token")), http.StatusNoContent)
		script := `echo "fence=$REDLOCKD_FENCING_TOKEN"; echo ready; read x < "$GATE"`
		var gates []*gate
		var readers []*proc
		for range 2 {
			gt := newGate(t)
			p := run(t, []string{"GATE=" + gt.Path}, "--resource", res, "--read", "--", "sh", "-c", script)
			if fence := p.waitLinePrefix("fence=", 30*time.Second); fence != fmt.Sprintf("fence=%d", w0.num(t, "fencing_token")) {
				t.Errorf("reader's CMD saw %q, want the last writer's fence %d", fence, w0.num(t, "fencing_token"))
			}
			gates, readers = append(gates, gt), append(readers, p)
		}
		for _, p := range readers {
			p.waitLine("ready", 30*time.Second) // both CMDs run at once
		}
		if info := inspect(t, g, res); info.str(t, "mode") != "read" || info.num(t, "readers") != 2 {
			t.Errorf("inspect while two readers run: %s", info.Body)
		}
		writer := run(t, nil, "--resource", res, "--wait", "30s", "--", "sh", "-c", `echo "fence=$REDLOCKD_FENCING_TOKEN"`)
		// The writer waits: a new reader is refused from then on.
		eventually(t, 20*time.Second, "the waiting writer keeps a new reader out", func() bool {
			r := acquire(t, g, res, `{"mode":"read","ttl_ms":1000}`)
			if r.Status == http.StatusCreated {
				release(t, g, res, r.str(t, "token"))
			}
			return r.Status == http.StatusConflict
		})
		for i, p := range readers {
			if strings.Contains(writer.out.String(), "fence=") {
				t.Fatalf("the writer's CMD ran while %d readers held the lock", len(readers)-i)
			}
			gates[i].open()
			p.wantExit(0, 30*time.Second)
		}
		line := writer.waitLinePrefix("fence=", 30*time.Second)
		if fence, err := strconv.ParseInt(strings.TrimPrefix(line, "fence="), 10, 64); err != nil || fence <= w0.num(t, "fencing_token") {
			t.Errorf("writer's CMD saw %q, want a fence above %d", line, w0.num(t, "fencing_token"))
		}
		writer.wantExit(0, 30*time.Second)
		wantFree(t, res)
	})

	// Repeated --resource: CMD runs holding every lock, taken all or none,
	// and sees each resource's fence; the locks stay held across TTLs and
	// are released at the end.
	t.Run("SeveralResources", func(t *testing.T) {
		res, gt := resourceName(t), newGate(t)
		a, b := res+"-a", res+"-b"
		p := run(t, []string{"GATE=" + gt.Path}, "--resource", b, "--resource", a, "--ttl", "1s", "--",
			"sh", "-c", `echo "held=$REDLOCKD_RESOURCE fences=$REDLOCKD_FENCING_TOKEN"; echo ready; read x < "$GATE"`)
		line := p.waitLinePrefix("held=", 30*time.Second)
		p.waitLine("ready", 30*time.Second)
		fb, fa := inspect(t, g, b).num(t, "fencing_token"), inspect(t, g, a).num(t, "fencing_token")
		if want := fmt.Sprintf("held=%s %s fences=%d %d", b, a, fb, fa); line != want {
			t.Errorf("CMD saw %q, want %q", line, want)
		}
		wantHeldFor(t, g, a, fa, 2500*time.Millisecond)
		wantProblem(t, acquire(t, g, b, ""), http.StatusConflict, "lock-held")
		other := run(t, nil, "--resource", a, "--fail-if-locked", "--", "true")
		other.wantExit(75, 30*time.Second)
		gt.open()
		p.wantExit(0, 30*time.Second)
		wantFree(t, a)
		wantFree(t, b)
	})

	// The lock stays held while CMD runs for several TTLs: run extends it.
	t.Run("HeldThroughout", func(t *testing.T) {
		res, gt := resourceName(t), newGate(t)
		p := run(t, []string{"GATE=" + gt.Path}, "--resource", res, "--ttl", "1s", "--",
			"sh", "-c", `echo ready; read x < "$GATE"`)
		p.waitLine("ready", 30*time.Second)
		wantHeldFor(t, g, res, inspect(t, g, res).num(t, "fencing_token"), 3500*time.Millisecond)
		gt.open()
		p.wantExit(0, 30*time.Second)
		wantFree(t, res)
	})

	// SIGTERM to run reaches CMD; run waits for it, releases, exits with
	// CMD's status.
	t.Run("SIGTERM", func(t *testing.T) {
		res := resourceName(t)
		p := run(t, nil, "--resource", res, "--", "sh", "-c",
			`trap 'echo got-TERM; exit 3' TERM; echo ready; while :; do sleep 0.1; done`)
		p.waitLine("ready", 30*time.Second)
		p.signal(syscall.SIGTERM)
		p.waitLine("got-TERM", 10*time.Second)
		p.wantExit(3, 10*time.Second)
		wantFree(t, res)
	})

	// SIGUSR1 and SIGHUP go to CMD, which goes on; SIGINT too.
	t.Run("ForwardSignals", func(t *testing.T) {
		res := resourceName(t)
		p := run(t, nil, "--resource", res, "--", "sh", "-c", `
			trap 'echo got-USR1' USR1
			trap 'echo got-HUP' HUP
			trap 'echo got-INT; exit 4' INT
			echo ready
			while :; do sleep 0.1; done`)
		p.waitLine("ready", 30*time.Second)
		p.signal(syscall.SIGUSR1)
		p.waitLine("got-USR1", 10*time.Second)
		p.signal(syscall.SIGHUP)
		p.waitLine("got-HUP", 10*time.Second)
		wantStatus(t, inspect(t, g, res), http.StatusOK)
		p.signal(syscall.SIGINT)
		p.waitLine("got-INT", 10*time.Second)
		p.wantExit(4, 10*time.Second)
		wantFree(t, res)
	})

	// SIGTERM while run waits for a lock held by another: run stops at
	// once, CMD never runs, the other's lock is untouched.
	t.Run("SIGTERMWhileWaiting", func(t *testing.T) {
		res := resourceName(t)
		held := lock(t, g, res, `{"ttl_ms":30000}`)
		proxy := startHoldProxy(t, g.URL)
		marker := filepath.Join(t.TempDir(), "ran")
		p := runProc(t, nil, "run", "--url", proxy.URL, "--resource", res, "--wait", "30s", "--", "touch", marker)
		proxy.waitRequest(t, "POST /locks/"+res, 30*time.Second)
		p.signal(syscall.SIGTERM)
		p.wantExit(128+15, 10*time.Second)
		wantNoFile(t, marker, "SIGTERM while waiting")
		if got, want := inspect(t, g, res).num(t, "fencing_token"), held.num(t, "fencing_token"); got != want {
			t.Errorf("the holder's lock changed: fence %d, want %d", got, want)
		}
		wantStatus(t, release(t, g, res, held.str(t, "token")), http.StatusNoContent)
	})

	// The gateway grants the lock but its answer never reaches run; SIGTERM
	// then: run releases the lock with the token it chose, so nothing is
	// left held until the TTL runs out.
	t.Run("SIGTERMAnswerLost", func(t *testing.T) {
		res := resourceName(t)
		proxy := startHoldProxy(t, g.URL)
		proxy.Hold.Store(true)
		marker := filepath.Join(t.TempDir(), "ran")
		p := runProc(t, nil, "run", "--url", proxy.URL, "--resource", res, "--wait", "5s", "--", "touch", marker)
		proxy.waitRequest(t, "POST /locks/"+res, 30*time.Second)
		eventually(t, 10*time.Second, "the gateway grants the lock", func() bool {
			return inspect(t, g, res).Status == http.StatusOK
		})
		proxy.Hold.Store(false) // the release gets through
		p.signal(syscall.SIGTERM)
		p.wantExit(128+15, 10*time.Second)
		wantNoFile(t, marker, "SIGTERM before the answer came")
		wantFree(t, res)
	})

	// Two runs of the same lock never overlap, though each CMD outlives the TTL.
	t.Run("Contention", func(t *testing.T) {
		res, journal := resourceName(t), filepath.Join(t.TempDir(), "journal")
		var ps []*proc
		for range 2 {
			ps = append(ps, run(t, []string{"JOURNAL=" + journal}, "--resource", res, "--ttl", "1s", "--wait", "30s", "--",
				"sh", "-c", `echo "enter run-$$ $REDLOCKD_FENCING_TOKEN" >> "$JOURNAL"; sleep 1.5; echo "exit run-$$" >> "$JOURNAL"`))
		}
		for _, p := range ps {
			p.wantExit(0, 60*time.Second)
		}
		checkJournal(t, journal, 2)
		wantFree(t, res)
	})

	t.Run("GatewayUnreachable", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "ran")
		p := runProc(t, nil, "run", "--url", closedURL(t), "--resource", resourceName(t), "--wait", "1s", "--", "touch", marker)
		p.wantExit(runUnavailable, 30*time.Second)
		wantNoFile(t, marker, "gateway unreachable")
		if !strings.Contains(p.errs.String(), "unavailable") {
			t.Errorf("stderr %q does not say the gateway is unavailable", p.errs.String())
		}
		if p.elapsed() < 900*time.Millisecond {
			t.Errorf("--wait 1s gave up after %v on a gateway that did not answer", p.elapsed())
		}
	})

	// The URL and key file come from the environment too.
	t.Run("Env", func(t *testing.T) {
		res := resourceName(t)
		p := runProc(t, []string{"REDLOCKD_URL=" + g.URL}, "run", "--resource", res, "--", "true")
		p.wantExit(0, 30*time.Second)
		p = runProc(t, []string{"REDLOCKD_URL=" + g.URL, "REDLOCKD_API_KEY_FILE=/nonexistent/key"}, "run", "--resource", res, "--", "true")
		p.wantExit(runUsage, 30*time.Second)
	})

	t.Run("Usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"--", "true"},                      // no --resource
			{"--resource", "r"},                 // no command
			{"--resource", "a/b", "--", "true"}, // bad name
			{"--resource", "r", "--ttl", "1ms", "--", "true"},
		} {
			run(t, nil, args...).wantExit(runUsage, 30*time.Second)
		}
		// A TTL above the gateway's max is refused by the gateway: also 64.
		run(t, nil, "--resource", resourceName(t), "--ttl", "10m", "--", "true").wantExit(runUsage, 30*time.Second)
	})
}

// TestRunLockLost: when no extension can succeed (3 of 5 nodes killed while
// CMD runs), CMD gets SIGTERM once the lock's validity ends and run exits
// 76; with the quorum gone, run cannot take a lock: 69, after trying again
// while --wait lasts (docs/clients.md "`redlockd run` (shell scripts, cron
// jobs)").
func TestRunLockLost(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 5)
	g := startGateway(t, nodes)
	res := resourceName(t)
	p := runProc(t, nil, "run", "--url", g.URL, "--resource", res, "--ttl", "2s", "--grace", "5s", "--", "sh", "-c",
		`trap 'echo got-TERM; exit 0' TERM; echo ready; while :; do sleep 0.1; done`)
	p.waitLine("ready", 30*time.Second)
	start := time.Now()
	for _, n := range nodes[:3] {
		n.Kill()
	}
	p.waitLine("got-TERM", 15*time.Second)
	p.wantExit(runLockLost, 15*time.Second)
	t.Logf("CMD terminated and run exited %v after the nodes were killed (ttl 2s)", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(p.errs.String(), "lost") {
		t.Errorf("stderr %q does not say the lock was lost", p.errs.String())
	}

	marker := filepath.Join(t.TempDir(), "ran")
	q := runProc(t, nil, "run", "--url", g.URL, "--resource", resourceName(t), "--fail-if-locked", "--", "touch", marker)
	q.wantExit(runUnavailable, 30*time.Second)
	// With a wait, 503s are tried again while it lasts.
	q = runProc(t, nil, "run", "--url", g.URL, "--resource", resourceName(t), "--wait", "1s", "--", "touch", marker)
	q.wantExit(runUnavailable, 30*time.Second)
	if q.elapsed() < 900*time.Millisecond {
		t.Errorf("--wait 1s gave up after %v on a 503", q.elapsed())
	}
	wantNoFile(t, marker, "quorum unavailable")
}

// TestRunLockLostRefused: an extension refused with 409 (the lock's keys
// vanished: FLUSHALL on every node) means the lock is lost: CMD, which
// ignores SIGTERM, is killed after --grace and run exits 76
// (docs/clients.md "`redlockd run` (shell scripts, cron jobs)").
func TestRunLockLostRefused(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	g := startGateway(t, nodes)
	res := resourceName(t)
	p := runProc(t, nil, "run", "--url", g.URL, "--resource", res, "--ttl", "3s", "--grace", "1s", "--", "sh", "-c",
		`trap '' TERM; echo "pid $$"; echo ready; while :; do sleep 0.1; done`)
	pid := readyCommand(t, p)
	start := time.Now()
	for _, n := range nodes {
		if err := n.Client().FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p.wantExit(runLockLost, 20*time.Second)
	t.Logf("run exited %v after the keys vanished (extension every 1s, grace 1s)", time.Since(start).Round(time.Millisecond))
	for _, want := range []string{"lost", "SIGKILL"} {
		if !strings.Contains(p.errs.String(), want) {
			t.Errorf("stderr %q does not mention %q", p.errs.String(), want)
		}
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("CMD (pid %d) still runs after run exited", pid)
	}
}

// readyCommand waits for a CMD that prints "pid <pid>" and then "ready",
// and returns its pid.
func readyCommand(t *testing.T, p *proc) int {
	t.Helper()
	p.waitLine("ready", 30*time.Second)
	first, _, _ := strings.Cut(p.out.String(), "\n")
	pid, err := strconv.Atoi(strings.TrimPrefix(first, "pid "))
	if err != nil {
		t.Fatalf("CMD's pid: %v", err)
	}
	return pid
}

// TestRunKilled: when `redlockd run` itself is killed (SIGKILL, nothing of
// it runs any more), CMD gets SIGTERM from the kernel (the parent-death
// signal) rather than running on without the lock being extended
// (docs/clients.md "`redlockd run` (shell scripts, cron jobs)").
func TestRunKilled(t *testing.T) {
	t.Parallel()
	g := startGateway(t, startCluster(t, 3))
	p := runProc(t, nil, "run", "--url", g.URL, "--resource", resourceName(t), "--", "sh", "-c",
		`trap 'echo got-TERM; exit 0' TERM; echo "pid $$"; echo ready; while :; do sleep 0.1; done`)
	pid := readyCommand(t, p)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test failed, CMD still runs
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.waitLine("got-TERM", 10*time.Second)
	p.wantExit(128+int(syscall.SIGKILL), 10*time.Second)
}

// wantHeldFor checks every 100ms for d that resource is held with fence and
// that nobody else can take it.
func wantHeldFor(t *testing.T, g *Gateway, res string, fence int64, d time.Duration) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	checks := 0
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		wantProblem(t, acquire(t, g, res, ""), http.StatusConflict, "lock-held")
		info := inspect(t, g, res)
		wantStatus(t, info, http.StatusOK)
		if got := info.num(t, "fencing_token"); got != fence {
			t.Fatalf("fence %d while CMD runs, want %d", got, fence)
		}
		checks++
	}
	t.Logf("lock held with fence %d across %d checks over %v", fence, checks, d)
}

// TestRunTerminal: `redlockd run` on a terminal, as from an interactive
// shell, gives CMD the terminal, so it can read it (in the background it
// would be stopped by SIGTTIN), and Ctrl-C reaches it (docs/clients.md
// "`redlockd run` (shell scripts, cron jobs)").
func TestRunTerminal(t *testing.T) {
	t.Parallel()
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	g := startGateway(t, startCluster(t, 3))
	master, slave := openPTY(t)
	res := resourceName(t)
	cmd := exec.Command(binPath, "run", "--url", g.URL, "--resource", res, "--", "sh", "-c",
		`echo ready; read line; echo "got $line"; while :; do sleep 0.1; done`)
	cmd.Env = cleanEnv()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// A new session whose controlling terminal is the pty: run is its
	// foreground process group, as when typed at a shell prompt.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
	term := &syncBuffer{}
	go func() { _, _ = io.Copy(term, master) }() // ends with EIO once every slave is closed
	waitOutput := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(term.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("terminal: no %q within 30s; got:\n%s", want, term.String())
			}
			time.Sleep(20 * time.Millisecond) // the terminal has no event to await but its bytes
		}
	}

	waitOutput("ready")
	if _, err := io.WriteString(master, "hello\n"); err != nil {
		t.Fatal(err)
	}
	waitOutput("got hello")
	wantStatus(t, inspect(t, g, res), http.StatusOK)
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not exit after Ctrl-C; terminal:\n%s", term.String())
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.ExitStatus() != 128+2 {
		t.Errorf("run exited %v, want 130 (CMD killed by SIGINT); terminal:\n%s", cmd.ProcessState, term.String())
	}
	wantNotHeld(t, inspectAnswered(t, g, res))
}

// openPTY opens a pseudo-terminal pair (closed at cleanup).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty slave: %v", err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// TestRunUnavailableSaysWhy: when no quorum of nodes answers, `redlockd run`
// gives the gateway's last answer (its problem detail), not "unreachable",
// whether the acquire was refused (69), the extension right after a slow
// acquire was (69), or the extensions while CMD ran were (76); when the
// gateway itself does not answer, it says so
// (docs/clients.md "`redlockd run` (shell scripts, cron jobs)"). Time is
// the subject: the gateways answer for paused nodes within the fault tests'
// nodeTimeout, well inside the lock's validity, which the extensions may
// not outlive.
func TestRunUnavailableSaysWhy(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	marker := filepath.Join(t.TempDir(), "ran")
	wantAnswer := func(t *testing.T, p *proc) {
		t.Helper()
		msg := p.errs.String()
		t.Logf("stderr: %s", msg)
		for _, want := range []string{"quorum-unavailable", "did not answer in time"} {
			if !strings.Contains(msg, want) {
				t.Errorf("stderr %q does not give the gateway's answer (%q)", msg, want)
			}
		}
		if strings.Contains(msg, "unreachable") {
			t.Errorf("stderr %q calls a gateway that answered unreachable", msg)
		}
	}

	t.Run("Acquire", func(t *testing.T) {
		nodes := startCluster(t, 3)
		g := startGateway(t, nodes, "--node-timeout", nodeTimeout.String())
		pause(t, nodes)
		p := runProc(t, nil, "run", "--url", g.URL, "--resource", resourceName(t), "--wait", "3s", "--", "touch", marker)
		p.wantExit(runUnavailable, 30*time.Second)
		wantAnswer(t, p)
	})

	// The acquire's answer comes late, after half the TTL: run extends the
	// lock at once, and the nodes stopped answering meanwhile.
	t.Run("ExtendAfterSlowAcquire", func(t *testing.T) {
		nodes := startCluster(t, 3)
		g := startGateway(t, nodes, "--node-timeout", nodeTimeout.String())
		target, err := url.Parse(g.URL)
		if err != nil {
			t.Fatal(err)
		}
		const ttl = 3 * time.Second
		granted, paused := make(chan struct{}), make(chan struct{})
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.ErrorLog = log.New(io.Discard, "", 0) // the extension cut short by the lock's validity
		var once sync.Once
		rp.ModifyResponse = func(res *http.Response) error {
			if res.Request.Method == http.MethodPost && res.StatusCode == http.StatusCreated {
				once.Do(func() {
					close(granted)
					<-paused
					time.Sleep(ttl / 2) // the validity the answer takes to arrive
				})
			}
			return nil
		}
		proxy := httptest.NewServer(rp)
		defer proxy.Close()
		p := runProc(t, nil, "run", "--url", proxy.URL, "--resource", resourceName(t), "--ttl", ttl.String(),
			"--wait", "3s", "--", "touch", marker)
		select {
		case <-granted:
		case <-time.After(30 * time.Second):
			t.Fatal("no lock granted within 30s")
		}
		pause(t, nodes)
		close(paused)
		p.wantExit(runUnavailable, 30*time.Second)
		wantAnswer(t, p)
	})

	t.Run("WhileCommandRuns", func(t *testing.T) {
		nodes := startCluster(t, 3)
		g := startGateway(t, nodes, "--node-timeout", nodeTimeout.String())
		p := runProc(t, nil, "run", "--url", g.URL, "--resource", resourceName(t), "--ttl", "2s", "--grace", "5s", "--",
			"sh", "-c", `trap 'exit 0' TERM; echo ready; while :; do sleep 0.1; done`)
		p.waitLine("ready", 30*time.Second)
		pause(t, nodes)
		p.wantExit(runLockLost, 30*time.Second)
		wantAnswer(t, p)
	})

	t.Run("GatewayDown", func(t *testing.T) {
		p := runProc(t, nil, "run", "--url", closedURL(t), "--resource", resourceName(t), "--wait", "1s", "--", "touch", marker)
		p.wantExit(runUnavailable, 30*time.Second)
		if msg := p.errs.String(); !strings.Contains(msg, "unreachable") {
			t.Errorf("stderr %q does not say the gateway is unreachable", msg)
		}
	})
	wantNoFile(t, marker, "no quorum or no gateway")
}

// pause stops nodes (SIGSTOP) until the test ends.
func pause(t *testing.T, nodes []*RedisNode) {
	t.Helper()
	for _, n := range nodes {
		n.Pause()
		t.Cleanup(n.Resume)
	}
}

// TestRunShortGatewayMaxWait: `redlockd run` waits up to its own --wait for
// the lock against a gateway whose --max-wait (1s) is shorter, as
// docs/operations.md "Scaling the gateway horizontally" advises behind a
// load balancer with a short idle timeout; a value that the gateway refuses
// for another reason is still a usage error
// (docs/clients.md "`redlockd run` (shell scripts, cron jobs)").
func TestRunShortGatewayMaxWait(t *testing.T) {
	t.Parallel()
	g := startGateway(t, startCluster(t, 3), "--max-wait", "1s")
	run := func(args ...string) *proc {
		return runProc(t, nil, append([]string{"run", "--url", g.URL}, args...)...)
	}

	// A free lock with the default --wait (60s).
	res := resourceName(t)
	run("--resource", res, "--", "true").wantExit(0, 30*time.Second)
	wantNotHeld(t, inspectAnswered(t, g, res))

	// A lock held by another until it expires, 2.5s later.
	held := time.Now()
	lock(t, g, res, `{"ttl_ms":2500}`)
	p := run("--resource", res, "--wait", "20s", "--", "true")
	p.wantExit(0, 30*time.Second)
	if d := p.exitedAt.Sub(held); d < 2*time.Second {
		t.Errorf("run got the lock %v after it was taken, before the holder's expired", d)
	}

	// A TTL above the gateway's max TTL: refused at once.
	p = run("--resource", res, "--ttl", "2m", "--", "true")
	p.wantExit(runUsage, 30*time.Second)
	if msg := p.errs.String(); !strings.Contains(msg, "ttl_ms: must be within") {
		t.Errorf("stderr %q does not say why the gateway refused", msg)
	}
}

// TestRunNestedEnv: the CMD of `redlockd run` gets the variables of what that
// run holds (docs/clients.md "`redlockd run` (shell scripts, cron jobs)"),
// and only those: a run inside another (--semaphore in --resource, and the
// other way round) leaves none of the outer run's that would pair its name
// with the inner run's token.
func TestRunNestedEnv(t *testing.T) {
	t.Parallel()
	g := startGateway(t, startCluster(t, 3))
	res, sem := resourceName(t), resourceName(t)+"-sem"
	show := `echo "resource=${REDLOCKD_RESOURCE-unset} semaphore=${REDLOCKD_SEMAPHORE-unset} permit=${REDLOCKD_PERMIT-unset}"`
	lockArgs := []string{"run", "--url", g.URL, "--resource", res, "--"}
	semArgs := []string{"run", "--url", g.URL, "--semaphore", sem, "--limit", "1", "--"}
	for want, args := range map[string][]string{
		"resource=unset semaphore=" + sem + " permit=0":     append(append(lockArgs, binPath), append(semArgs, "sh", "-c", show)...),
		"resource=" + res + " semaphore=unset permit=unset": append(append(semArgs, binPath), append(lockArgs, "sh", "-c", show)...),
	} {
		p := runProc(t, nil, args...)
		p.wantExit(0, 30*time.Second)
		if got := strings.TrimSpace(p.out.String()); got != want {
			t.Errorf("%q: inner CMD got %q, want %q", args, got, want)
		}
	}
}

// TestRunTooManyWaiters: `redlockd run --wait` tries a 503 too-many-waiters
// (every waiting slot of the gateway taken) again while --wait lasts, as
// any 503, and gets the lock once its holder's expired
// (docs/clients.md "`redlockd run` (shell scripts, cron jobs)").
func TestRunTooManyWaiters(t *testing.T) {
	t.Parallel()
	g := startGateway(t, startCluster(t, 3), "--max-waiters", "1")
	busy, res := resourceName(t), resourceName(t)
	tok := lock(t, g, busy, `{"ttl_ms":30000}`).str(t, "token")
	waiter := make(chan error, 1)
	go func() {
		_, err := g.try(http.MethodPost, "/locks/"+busy, `{"wait_ms":20000}`)
		waiter <- err
	}()
	eventually(t, 10*time.Second, "the waiter to wait", func() bool { return scrapeMetrics(t, g).value("redlockd_waiters") == 1 })

	lock(t, g, res, `{"ttl_ms":1500}`)
	p := runProc(t, nil, "run", "--url", g.URL, "--resource", res, "--wait", "15s", "--", "true")
	p.wantExit(0, 30*time.Second)

	wantStatus(t, release(t, g, busy, tok), http.StatusNoContent)
	if err := <-waiter; err != nil {
		t.Errorf("the waiter: %v", err)
	}
}

// TestRunRetriesUnreachable: `redlockd run` tries again while --wait lasts
// when the gateway does not answer, as behind a proxy that answers 502
// while the gateway restarts (no problem body), and says so once; a 4xx
// that is not a gateway's, as a TLS gateway asked in plain HTTP answers, is
// a usage error (64), not "unavailable" (69)
// (docs/clients.md "`redlockd run` (shell scripts, cron jobs)").
func TestRunRetriesUnreachable(t *testing.T) {
	t.Parallel()
	g := startGateway(t, startCluster(t, 3))
	target, err := url.Parse(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	gw := httputil.NewSingleHostReverseProxy(target)
	var calls atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "upstream restarting", http.StatusBadGateway)
			return
		}
		gw.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	res := resourceName(t)
	p := runProc(t, nil, "run", "--url", proxy.URL, "--resource", res, "--wait", "20s", "--", "true")
	p.wantExit(0, 30*time.Second)
	if n := calls.Load(); n < 3 {
		t.Errorf("%d requests reached the proxy, want the two 502s and the acquire after them", n)
	}
	if msg := p.errs.String(); strings.Count(msg, "trying again while --wait lasts") != 1 {
		t.Errorf("stderr %q does not say once that run tries again", msg)
	}
	wantNotHeld(t, inspectAnswered(t, g, res))

	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	p = runProc(t, nil, "run", "--url", "http://"+tlsSrv.Listener.Addr().String(), "--resource", res, "--wait", "20s", "--", "true")
	p.wantExit(runUsage, 30*time.Second)
	if msg := p.errs.String(); !strings.Contains(msg, "check --url") {
		t.Errorf("stderr %q does not point at --url", msg)
	}
}
