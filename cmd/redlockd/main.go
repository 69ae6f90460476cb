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
	"strings"
)

// Exit statuses (sysexits.h where one fits).
const (
	exitOK      = 0
	exitFailure = 1  // a runtime error: cannot listen, serve failed, ...
	exitUsage   = 64 // EX_USAGE: bad command line or configuration
)

func main() {
	cmd, _ := splitCommand(os.Args[1:])
	ctx, stop := signalContext(cmd)
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
