// Command bench measures redlockd against its floors (docs/measuring.md),
// side by side in one run: it starts 5 redis-servers on free loopback ports
// and a gateway built from ./cmd/redlockd on them, runs each mode in turn,
// and prints every figure with its floor and a verdict.
//
//	go run ./bench/... [flags]
//
// It exits 3 when a floor fails, 1 when the run itself fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// floors are the groups of floors that --floors selects.
var floors = []string{"latency", "throughput", "contended", "waiters"}

type config struct {
	binary      string // the redlockd binary to start; "": go build ./cmd/redlockd
	floors      []string
	c           int // workers of the throughput floors
	duration    time.Duration
	waiters     int
	idle        time.Duration
	nodeTimeout time.Duration
}

func (c *config) runs(floor string) bool { return slices.Contains(c.floors, floor) }

// quiet drops go-redis's log lines (dial errors under load): the runs count
// their errors.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := parse(os.Args[1:])
	var rep *report
	if err == nil {
		rep, err = measure(ctx, c, os.Stderr)
	}
	failed := rep != nil && !rep.print(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(3)
	}
}

func parse(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	which := fs.String("floors", strings.Join(floors, ","), "comma-separated floors to measure: "+strings.Join(floors, ", "))
	fs.StringVar(&c.binary, "redlockd", "", "redlockd `binary` to measure (empty: go build ./cmd/redlockd)")
	fs.IntVar(&c.c, "c", 64, "workers of the throughput floors")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long each uncontended mode and the contended run last")
	fs.IntVar(&c.waiters, "waiters", 10000, "waiters of the waiters floor")
	fs.DurationVar(&c.idle, "idle", 5*time.Second, "window over which the Redis commands of idle waiters are counted")
	fs.DurationVar(&c.nodeTimeout, "node-timeout", 50*time.Millisecond, "per-node timeout of the gateway and the library")
	_ = fs.Parse(args) // it exits on a bad flag, 2
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.c < 1 || c.waiters < 10 || c.duration <= 0 || c.idle <= 0 || c.nodeTimeout <= 0 {
		return nil, errors.New("-c must be at least 1, --waiters at least 10, durations positive")
	}
	c.floors = strings.Split(*which, ",")
	for _, f := range c.floors {
		if !slices.Contains(floors, f) {
			return nil, fmt.Errorf("--floors: %q is not one of %s", f, strings.Join(floors, ", "))
		}
	}
	return c, nil
}
