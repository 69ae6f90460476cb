package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/valid"
	"github.com/redlockd/redlockd/redlock"
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
	fs.Func("resource", "`name` of the lock, 1-200 characters of [A-Za-z0-9._:-] other than . and .. (this or --semaphore); repeated, the locks of every resource, taken all or none",
		func(s string) error { c.Resources = append(c.Resources, s); return nil })
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
