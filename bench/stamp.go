package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// stamp is the first line of the report: what was measured, when and where.
// The gateway (the commit of the tree it was built from here, or what the
// given binary's version subcommand says) and the GOMAXPROCS it runs at (as
// its /metrics says), the date in UTC, the machine (OS/architecture, cores,
// CPU model) and the Go toolchain of the tool; the baseline's version and
// GOMAXPROCS with --baseline-redlockd. The report adds the load average at
// the start and at the end of the run: figures from a busy machine say so.
func stamp(ctx context.Context, c *config, l *lab) string {
	gateway := "commit " + treeCommit(ctx)
	if c.binary != "" {
		gateway = version(ctx, l.bin)
	}
	gateway += fmt.Sprintf(" at GOMAXPROCS %d", l.threads)
	if b := l.baseline; b != nil {
		gateway += fmt.Sprintf(" (baseline %s at GOMAXPROCS %d)", version(ctx, b.bin), b.threads)
	}
	return fmt.Sprintf("gateway %s, %s, %s/%s, %d CPUs (%s), %s", gateway, time.Now().UTC().Format("2006-01-02 15:04 MST"),
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), runtime.Version())
}

// version is what the redlockd binary bin's version subcommand says.
func version(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return fmt.Sprintf("%s (version: %v)", bin, err)
	}
	return strings.TrimSpace(string(out))
}

// loadAverage is the 1, 5 and 15 minute load averages of /proc/loadavg, or
// "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if fields := strings.Fields(string(b)); err == nil && len(fields) >= 3 {
		return strings.Join(fields[:3], " ")
	}
	return "unknown"
}

// treeCommit is the short commit of the working tree, "+dirty" when it has
// changes; without git, the revision the go command stamped into the tool
// (vcs.revision, vcs.modified); else "unknown".
func treeCommit(ctx context.Context) string {
	rev, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return buildCommit()
	}
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err != nil || len(st) > 0 {
		return strings.TrimSpace(string(rev)) + "+dirty"
	}
	return strings.TrimSpace(string(rev))
}

// buildCommit is the short vcs.revision of the tool's build info ("+dirty"
// with vcs.modified), or "unknown".
func buildCommit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value[:min(len(s.Value), 9)]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev == "" {
		return "unknown"
	}
	return rev + dirty
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
