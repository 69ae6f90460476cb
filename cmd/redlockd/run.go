package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlockd/redlockd/client"
)

// Exit statuses of `redlockd run` besides exitUsage and CMD's own
// (docs/clients.md; sysexits.h numbers).
const (
	exitUnavailable = 69  // EX_UNAVAILABLE: gateway or quorum unavailable, CMD not run
	exitLockHeld    = 75  // EX_TEMPFAIL: lock (every permit) held by others, not acquired within --wait
	exitLockLost    = 76  // lock lost while CMD ran
	exitCannotExec  = 126 // CMD found but not executable (as shells do)
	exitNotFound    = 127 // CMD not found (as shells do)
)

// requestMargin is added to a request's wait to bound it (client.Hold
// splits a long --wait into several requests); releaseTimeout bounds the
// release.
const (
	requestMargin  = 10 * time.Second
	releaseTimeout = 5 * time.Second
)

// stopSignals end the wait for the lock before CMD starts.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// groupSignals are forwarded to CMD's process group (as a terminal sends
// them); the other forwarded signals go to CMD alone.
var groupSignals = map[os.Signal]bool{syscall.SIGINT: true, syscall.SIGTERM: true, syscall.SIGQUIT: true}

// forwardedSignals are the signals run forwards to CMD.
var forwardedSignals = append(stopSignals, syscall.SIGUSR1, syscall.SIGUSR2)

// runRun is `redlockd run`. The signals that main's ctx stands for come to
// run on its own channel, so ctx is used only for its values: its
// cancellation must not cut an extension or the final release short. An
// unknown REDLOCKD_* variable in environ is a warning on stderr.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool), environ []string) int {
	sigc := make(chan os.Signal, 16)
	signal.Notify(sigc, forwardedSignals...)
	defer signal.Stop(sigc)

	cfg, err := ParseRunFlags(args, lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		printRunUsage(stdout)
		return exitOK
	}
	for _, f := range checkEnv(environ, "run", nil) {
		fmt.Fprintf(stderr, "redlockd run: warning: %s\n", f)
	}
	if err != nil {
		return usageOf(stderr, "redlockd run", err)
	}
	key := cfg.APIKey
	if key == "" && cfg.APIKeyFile != "" {
		if key, err = readAPIKey(cfg.APIKeyFile); err != nil {
			return usageOf(stderr, "redlockd run", err)
		}
	}
	// ctx has no deadline: Timeout bounds each request on top of its wait.
	c, err := client.New(cfg.URL, client.Options{APIKey: key, Timeout: requestMargin})
	if err != nil {
		return usageOf(stderr, "redlockd run", err)
	}
	r := &runner{cfg: cfg, client: c, base: context.WithoutCancel(ctx), stdout: stdout, stderr: stderr, signals: sigc}
	h, code := r.acquirePhase()
	if code >= 0 {
		return code
	}
	return r.runCommand(h)
}

// runner is one `redlockd run`.
type runner struct {
	cfg            RunConfig
	client         *client.Client
	base           context.Context
	stdout, stderr io.Writer
	signals        <-chan os.Signal
}

func (r *runner) printf(format string, args ...any) {
	fmt.Fprintf(r.stderr, "redlockd run: "+format+"\n", args...)
}

// target is what run holds: a lock (a reader's with --read), the locks of
// several resources, or a permit.
func (r *runner) target() client.Target {
	switch {
	case r.cfg.Semaphore != "":
		return client.SemaphorePermit{Name: r.cfg.Semaphore, Limit: r.cfg.Limit}
	case len(r.cfg.Resources) > 1:
		return client.Locks{Resources: r.cfg.Resources}
	case r.cfg.Read:
		return client.ReadLock{Resource: r.cfg.Resources[0]}
	}
	return client.WriteLock{Resource: r.cfg.Resources[0]}
}

// acquirePhase takes the lock with client.Hold (which tries again while
// --wait lasts, with a token of its own so that a retry is idempotent),
// letting a stop signal interrupt the wait. It returns the hold and -1, or
// the exit status when CMD must not run.
func (r *runner) acquirePhase() (*client.Hold, int) {
	ctx, cancel := context.WithCancel(r.base)
	defer cancel()
	var told sync.Once
	o := client.HoldOptions{TTL: r.cfg.TTL, Wait: r.cfg.Wait, Owner: r.cfg.Owner, OnRetry: func(err error) {
		if errors.Is(err, client.ErrUnreachable) {
			told.Do(func() {
				r.printf("no answer from the gateway at %s (%v): trying again while --wait lasts", r.cfg.URL, err)
			})
		}
	}}
	var h *client.Hold
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		h, err = r.client.Hold(ctx, r.target(), o) // read once done is closed
	}()
	for {
		select {
		case <-done:
			if err == nil {
				return h, -1
			}
			return nil, r.acquireFailed(err)
		case sig := <-r.signals:
			if !slices.Contains(stopSignals, sig) {
				continue // no CMD to forward SIGUSR1/2 to yet
			}
			cancel() // Hold releases what it may have taken
			<-done
			if h != nil { // taken just before
				r.release(h)
			}
			r.printf("got %v before the lock was acquired: CMD not run", sig)
			return nil, 128 + int(sig.(syscall.Signal))
		}
	}
}

// acquireFailed says why the lock was not acquired; it returns the status.
// (Hold released what an unknown outcome may have taken.)
func (r *runner) acquireFailed(err error) int {
	held := r.subject() + " is held by another owner"
	if r.cfg.Semaphore != "" {
		held = fmt.Sprintf("every permit of %s is held by other owners", r.subject())
	}
	switch {
	case errors.Is(err, client.ErrLockHeld):
		if r.cfg.Wait == 0 {
			r.printf("%s: CMD not run", held)
		} else {
			r.printf("%s: not acquired within %v: CMD not run", held, r.cfg.Wait)
		}
		return exitLockHeld
	case errors.Is(err, client.ErrNotOwner):
		// The extension right after a slow acquire found the lock gone.
		r.printf("%s was lost right after it was acquired: CMD not run", r.subject())
		return exitLockHeld
	case errors.Is(err, client.ErrLimitMismatch):
		limit := 0
		if pe, ok := errors.AsType[*client.ProblemError](err); ok {
			limit = pe.Limit
		}
		r.printf("the permits of %s are held with --limit %d, not %d: every holder must give the same --limit: CMD not run",
			r.subject(), limit, r.cfg.Limit)
		return exitUsage
	case errors.Is(err, client.ErrInvalid):
		r.printf("the gateway refused the request: %v", err)
		return exitUsage
	case errors.Is(err, client.ErrUnauthorized):
		r.printf("the gateway refused the API key (see --api-key-file and REDLOCKD_API_KEY): %v", err)
		return exitUsage
	case errors.Is(err, client.ErrNotFound):
		// A wrong --url (or proxy prefix): retrying cannot help.
		r.printf("%s names no route of a redlockd gateway (check --url): %v: CMD not run", r.cfg.URL, err)
		return exitUsage
	case foreign(err):
		r.printf("%s answered %v, which is not a redlockd gateway's answer (check --url: its scheme, host and port): CMD not run", r.cfg.URL, err)
		return exitUsage
	default:
		r.printf("gateway or quorum unavailable at %s: %v: CMD not run", r.cfg.URL, err)
		return exitUnavailable
	}
}

// foreign reports whether err is a 4xx that is not a problem of the
// gateway's: another server, or a TLS gateway asked in plain HTTP.
func foreign(err error) bool {
	pe, ok := errors.AsType[*client.ProblemError](err)
	return ok && pe.Kind() == "" && pe.Status >= 400 && pe.Status < 500
}

// heldEnv are the variables that name what run holds, for CMD: a lock's or
// a permit's.
var heldEnv = []string{"REDLOCKD_RESOURCE", "REDLOCKD_SEMAPHORE", "REDLOCKD_PERMIT"}

// runCommand runs CMD under the hold and returns the exit status.
func (r *runner) runCommand(h *client.Hold) int {
	cmd := exec.Command(r.cfg.Command[0], r.cfg.Command[1:]...)
	held := []string{"REDLOCKD_RESOURCE=" + strings.Join(r.cfg.Resources, " ")}
	if r.cfg.Semaphore != "" {
		held = []string{"REDLOCKD_SEMAPHORE=" + r.cfg.Semaphore, "REDLOCKD_PERMIT=" + strconv.Itoa(h.Permit())}
	}
	// With several resources, their fences in the same order.
	fences := strings.Trim(fmt.Sprint(h.Fences()), "[]")
	// A nested run's CMD gets what this run holds only: no name of the
	// outer run's to pair with this run's token.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(heldEnv, name)
	})
	cmd.Env = append(append(env, held...),
		"REDLOCKD_TOKEN="+h.Token(),
		"REDLOCKD_FENCING_TOKEN="+fences,
		"REDLOCKD_URL="+r.cfg.URL,
	)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, r.stdout, r.stderr
	// CMD gets its own process group, so that SIGTERM and SIGKILL reach what
	// it started too. If run itself is killed (SIGKILL), CMD gets SIGTERM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	tty, foreground := terminalForeground()
	if foreground {
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, tty
	}

	// Pdeathsig fires when the thread that forked CMD ends: keep this
	// goroutine on its thread until CMD is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		r.release(h)
		r.printf("CMD: %v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	pgid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var (
		lost  error
		ended = h.Done() // closed when the hold is lost: run releases it only after CMD exits
		grace <-chan time.Time
	)
wait:
	for {
		select {
		case <-exited:
			break wait
		case sig := <-r.signals:
			target := pgid
			if groupSignals[sig] {
				target = -pgid
			}
			_ = syscall.Kill(target, sig.(syscall.Signal))
		case <-ended:
			ended, lost = nil, h.Err()
			r.printf("%s lost: %v; sending SIGTERM to CMD (SIGKILL in %v)", r.subject(), lost, r.cfg.Grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			grace = time.After(r.cfg.Grace)
		case <-grace:
			grace = nil
			r.printf("CMD did not exit within %v of SIGTERM: sending SIGKILL", r.cfg.Grace)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	if foreground {
		restoreForeground(tty)
	}
	err := r.release(h)
	status := exitStatus(cmd.ProcessState)
	switch {
	case lost != nil:
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // what CMD left behind, if anything
		return exitLockLost
	case errors.Is(err, client.ErrNotOwner):
		r.printf("%s was not held when CMD exited (%v; CMD exited %d): its work may not have been exclusive",
			r.subject(), err, status)
		return exitLockLost
	case errors.Is(err, client.ErrLost):
		r.printf("%s: no extension succeeded before its validity ended, while CMD ran (CMD exited %d): "+
			"its work may not have been exclusive (%v)", r.subject(), status, err)
		return exitLockLost
	case err != nil:
		r.printf("could not confirm the release of %s (%v): it expires within %v", r.subject(), err, r.cfg.TTL)
	}
	return status
}

// release ends the hold with a fresh, bounded context and returns
// Hold.Release's error.
func (r *runner) release(h *client.Hold) error {
	ctx, cancel := context.WithTimeout(r.base, releaseTimeout)
	defer cancel()
	return h.Release(ctx)
}

// subject names what run holds, for messages.
func (r *runner) subject() string {
	if len(r.cfg.Resources) == 1 { // a writer's or a reader's
		return fmt.Sprintf("lock %q", r.cfg.Resources[0])
	}
	return r.target().String()
}

// exitStatus is the status a shell would report for CMD: its exit code, or
// 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return exitFailure
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
