// Command redlockd is an HTTP lock gateway implementing the Redlock algorithm
// over N independent Redis masters. Run `redlockd help` for usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Exit statuses (sysexits.h where one fits).
const (
	exitOK      = 0
	exitFailure = 1  // a runtime error: cannot listen, serve failed, ...
	exitUsage   = 64 // EX_USAGE: bad command line or configuration
)

func init() {
	// Log times in UTC with milliseconds (docs/operations.md, logs).
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.TimestampFunc = func() time.Time { return time.Now().UTC() }
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default behaviour: a second
		// Ctrl-C kills a shutdown that takes too long.
		<-ctx.Done()
		stop()
	}()
	if cmd, _ := splitCommand(os.Args[1:]); cmd == "serve" {
		// SIGHUP reloads keys and certificate once Main.Run listens for
		// it; until then (and after) it must not kill the gateway.
		signal.Ignore(syscall.SIGHUP)
	}
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv, os.Environ()...)
	stop()
	os.Exit(code)
}

// splitCommand returns the subcommand args name (serve when none is named)
// and its arguments.
func splitCommand(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "serve", args
}

// run dispatches the subcommand in args and returns the exit status.
// environ (NAME=value) is for checkEnv: tests that leave it out check none.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool), environ ...string) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, args := splitCommand(args)
	switch cmd {
	case "serve":
		return runServe(ctx, args, stdout, stderr, lookupEnv, environ)
	case "version":
		if len(args) > 0 {
			return usage(stderr, fmt.Errorf("version takes no arguments"))
		}
		runVersion(stdout)
		return exitOK
	case "help":
		printUsage(stdout)
		return exitOK
	case "run":
		return runRun(ctx, args, stdout, stderr, lookupEnv, environ)
	case "keygen":
		return runKeygen(args, stdout, stderr)
	case "probe":
		return runProbe(ctx, args, stdout, stderr, lookupEnv)
	default:
		return usage(stderr, fmt.Errorf("unknown command %q", hidePassword(cmd)))
	}
}

// runServe parses the serve configuration and runs the gateway until ctx
// ends; a fatal finding of checkEnv is a usage error.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool), environ []string) int {
	cfg, err := ParseServeFlags(args, lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return exitOK
	}
	if err != nil {
		return usage(stderr, err)
	}
	m := &Main{Config: cfg, Stderr: stderr, UnknownEnv: checkEnv(environ, "serve", &cfg)}
	var fatal []error
	for _, f := range m.UnknownEnv {
		if f.Fatal != "" {
			fatal = append(fatal, errors.New(f.String()))
		}
	}
	if len(fatal) > 0 {
		return usage(stderr, errors.Join(fatal...))
	}
	err = m.Run(ctx)
	switch _, isUsage := errors.AsType[*UsageError](err); {
	case err == nil:
		return exitOK
	case isUsage:
		return usage(stderr, err)
	default:
		// Logged where it happened when the logger existed; say it plainly too.
		fmt.Fprintf(stderr, "redlockd: %v\n", err)
		return exitFailure
	}
}

// usage reports a usage or configuration error and returns exitUsage.
func usage(stderr io.Writer, err error) int { return usageOf(stderr, "redlockd", err) }

// usageOf reports a usage error of the command cmd ("redlockd run") and
// returns exitUsage.
func usageOf(stderr io.Writer, cmd string, err error) int {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(stderr, "%s: %s\n", cmd, line)
	}
	fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd)
	return exitUsage
}

// printUsage writes the help: commands, every serve flag with its
// environment variable and default, and the exit statuses.
// docs/configuration.md says more.
func printUsage(w io.Writer) {
	fmt.Fprint(w, `redlockd: an HTTP lock gateway implementing Redlock over N independent Redis masters.

Usage:
  redlockd [serve] [flags]   run the gateway (serve is the default command)
  redlockd run [flags] -- CMD [ARGS...]
                             hold a lock around a command (redlockd run --help)
  redlockd keygen --name N --namespace S
                             make an API key (line 1) and its keys-file entry (line 2)
  redlockd probe [--url URL] exit 0 iff GET URL (default: local /healthz) answers 2xx
  redlockd version           print the version (also: --version)
  redlockd help              print this help (also: --help, -h)

With no --redis, redlockd runs in dev mode: 5 embedded in-memory Redis nodes,
nothing durable or fault tolerant. Try: redlockd, then
  curl -X POST localhost:8080/locks/demo

Serve flags (docs/configuration.md says more). A flag wins over its variable,
a non-empty variable over the default. Durations: 50ms, 30s, 1m.

`)
	printServeFlags(w)
	fmt.Fprint(w, `
Signals: SIGINT or SIGTERM shut down gracefully (waiting acquires get 503,
in-flight requests finish). SIGHUP reloads the API keys file and the TLS
certificate; one that does not load is logged and the previous one stays.

Exit status: 0 after a graceful shutdown, 64 on a usage or configuration
error, 1 on any other error.
`)
}
