package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

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

// printFlags writes the help of the flags of fs named in order: each with
// its placeholder, its usage wrapped, and the notes that notes gives for it
// on one line (def is its default as shown: 60s, not 1m0s).
func printFlags(w io.Writer, fs *flag.FlagSet, order []string, notes func(f *flag.Flag, def string) []string) {
	for _, name := range order {
		f := fs.Lookup(name)
		placeholder, usage := flag.UnquoteUsage(f)
		sep := " "
		switch f.Value.(type) {
		case *onOff:
			sep, placeholder = "", "[=on|off]" // given alone: on
		case *duration:
			placeholder = "duration"
		case *quarantineMode:
			placeholder = "auto|on|off"
		}
		def := f.DefValue
		if d, err := time.ParseDuration(def); err == nil && placeholder == "duration" && d%time.Second == 0 {
			def = fmt.Sprintf("%ds", d/time.Second)
		}
		fmt.Fprintf(w, "  %s\n", strings.TrimSpace("--"+name+sep+placeholder))
		for _, line := range wrap(usage, 72) {
			fmt.Fprintf(w, "        %s\n", line)
		}
		if n := notes(f, def); len(n) > 0 {
			fmt.Fprintf(w, "        %s\n", strings.Join(n, ", "))
		}
	}
}

// wrap splits s into lines of at most width characters, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}
