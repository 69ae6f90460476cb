package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// UsageError is an error in the command line or the configuration: redlockd
// exits with status 64 (EX_USAGE) on it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }

func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// check is one rule of a configuration: msg is the problem when bad.
type check struct {
	bad bool
	msg string
}

// problems returns the message of each bad check, in order.
func problems(checks []check) []error {
	var errs []error
	for _, c := range checks {
		if c.bad {
			errs = append(errs, errors.New(c.msg))
		}
	}
	return errs
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
