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

	"golang.org/x/sys/unix"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/valid"
	"github.com/redlockd/redlockd/redlock"
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

// RunConfig is the configuration of `redlockd run`: each field but APIKey
// and Command is the flag of the same name (see flagSet). Either Resources
// (a lock: a reader's with Read; with several resources, a writer's on all
// of them) or Semaphore and Limit (a permit of a semaphore) is set.
type RunConfig struct {
	URL, Owner, APIKeyFile string
	Resources              []string // --resource, repeated
	Read                   bool
	Semaphore              string
	Limit                  int
	TTL, Wait, Grace       time.Duration
	APIKey                 string   // from REDLOCKD_API_KEY; never printed
	Command                []string // CMD and its arguments
}

// runEnv are the flags of run with an environment variable twin. The other
// flags have none on purpose: REDLOCKD_RESOURCE (REDLOCKD_SEMAPHORE) is what
// CMD gets, and a `redlockd run` inside CMD must not take its parent's lock
// by accident.
var runEnv = map[string]string{"url": "REDLOCKD_URL", "api-key-file": "REDLOCKD_API_KEY_FILE"}

// flagSet returns the run flags bound to c's fields, which it sets to their
// defaults, and the --fail-if-locked switch.
func (c *RunConfig) flagSet(failIfLocked *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, help is printed by printRunUsage
	fs.Usage = func() {}
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "base `URL` of the redlockd gateway, http:// or https://")
	fs.Var((*names)(&c.Resources), "resource", "`name` of the lock, 1-200 characters of [A-Za-z0-9._:-] other than . and .. (this or --semaphore); repeated, the locks of every resource, taken all or none")
	fs.Var((*onOff)(&c.Read), "read", "hold a read lock on --resource, shared with other readers (without it, a writer's: exclusive)")
	fs.StringVar(&c.Semaphore, "semaphore", "", "`name` of a semaphore: hold one of its --limit permits instead of a lock")
	fs.IntVar(&c.Limit, "limit", 0, "`N`, the semaphore's number of permits, 1-256 (required with --semaphore)")
	c.TTL = redlock.DefaultTTL
	fs.Var((*duration)(&c.TTL), "ttl", "TTL of the lock; run extends it every ttl/3 while CMD runs")
	c.Wait = redlock.DefaultMaxWait
	fs.Var((*duration)(&c.Wait), "wait", "how long to wait for the lock when another owner holds it; 0 tries once")
	fs.Var((*onOff)(failIfLocked), "fail-if-locked", "do not wait: exit 75 at once if the lock is held (same as --wait 0)")
	fs.StringVar(&c.Owner, "owner", "", "free `text` shown to others by GET /locks/{resource} (default host:pid)")
	fs.StringVar(&c.APIKeyFile, "api-key-file", "", "`file` holding the API key, sent as Authorization: Bearer")
	c.Grace = 10 * time.Second
	fs.Var((*duration)(&c.Grace), "grace", "when the lock is lost, how long CMD has to exit after SIGTERM before SIGKILL")
	return fs
}

// runFlagOrder is the order of the flags in the help.
var runFlagOrder = []string{"url", "resource", "read", "semaphore", "limit", "ttl", "wait", "fail-if-locked", "owner", "api-key-file", "grace"}

// ParseRunFlags returns the configuration given by args (after "run") and
// the variables of runEnv and REDLOCKD_API_KEY; a flag wins over its
// variable, an empty variable counts as unset. The API key comes from the
// --api-key-file flag, else REDLOCKD_API_KEY, else REDLOCKD_API_KEY_FILE.
// CMD follows "--". May return flag.ErrHelp or a *UsageError listing every
// problem, never quoting the key.
func ParseRunFlags(args []string, lookupEnv func(string) (string, bool)) (RunConfig, error) {
	var c RunConfig
	var failIfLocked bool
	fs := c.flagSet(&failIfLocked)
	if err := parseFlags(fs, args); err != nil {
		return c, err
	}
	c.Command = fs.Args()
	given := map[string]bool{} // flags of the command line
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if key, ok := lookupEnv(runAPIKeyEnv); ok && !given["api-key-file"] {
		switch key = strings.TrimSpace(key); {
		case strings.ContainsAny(key, " \t\r\n"):
			add("%s must hold the key alone, on one line", runAPIKeyEnv)
		case key != "":
			c.APIKey = key
		}
	}
	for name, env := range runEnv {
		if name == "api-key-file" && c.APIKey != "" {
			continue // REDLOCKD_API_KEY wins
		}
		if v, ok := lookupEnv(env); ok && v != "" && !given[name] {
			_ = fs.Set(name, v) // string flags: cannot fail
		}
	}
	if failIfLocked {
		if given["wait"] && c.Wait != 0 {
			add("--fail-if-locked and --wait %v contradict each other", c.Wait)
		}
		c.Wait = 0
	}
	if _, err := client.New(c.URL, client.Options{}); err != nil {
		add("--url: %v", strings.TrimPrefix(err.Error(), "client: "))
	}
	several := valid.Resources(c.Resources) // what is wrong with several --resource
	errs = append(errs, problems([]check{
		{len(c.Resources) == 0 && c.Semaphore == "", "--resource is required (or --semaphore and --limit, for a permit)"},
		{len(c.Resources) > 0 && c.Semaphore != "", "--resource and --semaphore exclude each other: hold a lock or a permit"},
		{len(c.Resources) == 1 && !redlock.ValidName(c.Resources[0]),
			fmt.Sprintf("--resource %q must be 1-200 characters of [A-Za-z0-9._:-], other than . and ..", strings.Join(c.Resources, " "))},
		{len(c.Resources) > 1 && several != "", "--resource, repeated: " + several},
		{len(c.Resources) > 1 && c.Read, "--read takes one --resource: a lock on several resources is a writer's"},
		{c.Semaphore != "" && !redlock.ValidName(c.Semaphore),
			fmt.Sprintf("--semaphore %q must be 1-200 characters of [A-Za-z0-9._:-], other than . and ..", c.Semaphore)},
		{c.Semaphore != "" && (c.Limit < 1 || c.Limit > redlock.MaxLimit),
			fmt.Sprintf("--semaphore needs --limit within [1, %d]", redlock.MaxLimit)},
		{c.Semaphore == "" && given["limit"], "--limit goes with --semaphore"},
		{c.Semaphore != "" && c.Read, "--read goes with --resource, not --semaphore"},
		{c.TTL < redlock.MinTTL, fmt.Sprintf("--ttl %v is below the minimum TTL %v", c.TTL, redlock.MinTTL)},
		{c.Wait < 0, fmt.Sprintf("--wait %v must not be negative", c.Wait)},
		{c.Grace < 0, fmt.Sprintf("--grace %v must not be negative", c.Grace)},
		{len([]rune(c.Owner)) > redlock.MaxOwnerLen, fmt.Sprintf("--owner must be at most %d characters", redlock.MaxOwnerLen)},
		{len(c.Command) == 0, "no command: give it after --, e.g. redlockd run --resource backup -- ./backup.sh"},
	})...)
	if len(errs) > 0 {
		return c, &UsageError{Err: errors.Join(errs...)}
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	return c, nil
}

// readAPIKey returns the key held in path: the file's content without
// surrounding white space. Its errors never contain the key.
func readAPIKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--api-key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	switch {
	case key == "":
		return "", fmt.Errorf("--api-key-file %s is empty", path)
	case strings.ContainsAny(key, " \t\r\n"):
		return "", fmt.Errorf("--api-key-file %s must hold the key alone, on one line", path)
	}
	return key, nil
}

// printRunUsage writes the help of `redlockd run`: flags and exit statuses.
// docs/clients.md says more.
func printRunUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: redlockd run --resource NAME [--resource NAME...] [flags] -- CMD [ARGS...]
       redlockd run --semaphore NAME --limit N [flags] -- CMD [ARGS...]

Holds a lock around a command, like flock(1) for many machines (docs/clients.md
says more): acquires NAME, runs CMD with REDLOCKD_RESOURCE, REDLOCKD_TOKEN,
REDLOCKD_FENCING_TOKEN and REDLOCKD_URL set, extends the lock every ttl/3,
releases it when CMD exits and exits with CMD's status. With --read it holds
a read lock: other readers' CMDs may run at the same time, a writer's (a run
without --read) never. If the lock is lost, CMD's process group gets SIGTERM,
SIGKILL after --grace. Signals are forwarded to CMD; before CMD starts,
SIGINT, SIGTERM, SIGHUP and SIGQUIT stop run and SIGUSR1 and SIGUSR2 are
ignored. With --semaphore it holds one of the N permits of NAME instead (at
most N CMDs at once), and CMD gets REDLOCKD_SEMAPHORE and REDLOCKD_PERMIT
(0..N-1) instead of REDLOCKD_RESOURCE. With --resource repeated it holds the
locks of every resource named, taken all or none (no deadlock, in any order):
REDLOCKD_RESOURCE and REDLOCKD_FENCING_TOKEN then list the resources and their
fencing tokens, separated by spaces, in the same order.

Flags:
`)
	var c RunConfig
	var failIfLocked bool
	printFlags(w, c.flagSet(&failIfLocked), runFlagOrder, func(f *flag.Flag, def string) []string {
		var notes []string
		if env, ok := runEnv[f.Name]; ok {
			notes = append(notes, "env "+env)
		}
		if f.Name == "api-key-file" {
			notes = append(notes, "or the key itself in "+runAPIKeyEnv)
		}
		if def != "" && def != "false" && def != "0" {
			notes = append(notes, "default "+def)
		}
		return notes
	})
	fmt.Fprint(w, `
Exit status:
  CMD's   CMD ran holding the lock throughout (128+N if signal N killed it)
  64      usage error: bad flags, unreadable --api-key-file, or the gateway
          refused a value, the API key or the --url (404, or another 4xx
          that is not a gateway's), or the semaphore's permits are held
          with another --limit
  69      gateway or quorum unavailable (tried again while --wait lasts):
          CMD not run
  75      lock held by another owner (every permit held), not acquired
          within --wait: CMD not run
  76      lock lost while CMD ran, or not held when CMD exited
  126     CMD is not executable (CMD not run, lock released)
  127     CMD not found (CMD not run, lock released)
  128+N   run got signal N before CMD started: CMD not run, lock released
`)
}

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

// terminalForeground reports whether stdin is a terminal whose foreground
// process group is run's: CMD should then get the terminal, or reading it
// would stop CMD (SIGTTIN) in its own process group.
func terminalForeground() (fd int, ok bool) {
	fd = int(os.Stdin.Fd())
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return fd, err == nil && pgrp == syscall.Getpgrp()
}

// restoreForeground gives the terminal back to run's process group after
// CMD exited. run is in the background then, so SIGTTOU is ignored meanwhile.
func restoreForeground(fd int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, syscall.Getpgrp())
}
