package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/redistest"
)

// workLimit is the limit of the work group's semaphore: the largest.
const workLimit = client.MaxLimit

// workCall is one kind of call of the work group, and what the nodes spent on
// it: the time Redis counts for the scripts it ran (INFO commandstats,
// EVALSHA's usec over its calls, on each node), averaged over the nodes.
type workCall struct {
	name        string
	calls       int     // the calls sent
	evals, usec []int64 // on each node: the scripts run and their µs
	errors      int     // calls that did not answer as expected
	lastErr     string  // the last of them
}

// scripts is the number of scripts the nodes ran for the calls.
func (w workCall) scripts() (n int64) {
	for _, e := range w.evals {
		n += e
	}
	return n
}

// perScript is the Redis µs per script run, the mean over the nodes.
func (w workCall) perScript() (us float64) {
	for i, e := range w.evals {
		if e > 0 {
			us += float64(w.usec[i]) / float64(e) / float64(len(w.evals))
		}
	}
	return us
}

// measureWork measures the Redis time of calls one at a time through the
// gateway, each kind for d: a refused acquire of a held lock, a refused
// acquire of a semaphore of limit workLimit whose permits are all held,
// and GET of that semaphore with every permit held and with 2.
func measureWork(ctx context.Context, l *lab, prefix string, d time.Duration) (calls []workCall, err error) {
	defer l.closeConns()
	c := l.client
	lock, sem := prefix+"lock", prefix+"sem"
	if _, err := c.Acquire(ctx, lock, client.AcquireOptions{TTL: 10 * time.Minute}); err != nil {
		return nil, fmt.Errorf("work: the lock: %w", err)
	}
	var held []client.Permit
	for tries := 0; len(held) < workLimit; tries++ {
		p, err := c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: workLimit, TTL: 10 * time.Minute})
		switch {
		case err == nil:
			held = append(held, p)
		case tries > 10*workLimit || !errors.Is(err, client.ErrLockHeld):
			return nil, fmt.Errorf("work: permit %d of %d: %w", len(held)+1, workLimit, err)
		}
	}
	refused := func(err error) bool { return errors.Is(err, client.ErrLockHeld) }
	inspect := func(n int) func() error {
		return func() error {
			s, err := c.InspectSemaphore(ctx, sem)
			if err == nil && len(s.Permits) != n {
				err = fmt.Errorf("%d permits held, want %d", len(s.Permits), n)
			}
			return err
		}
	}
	kinds := []struct {
		name string
		call func() error
		ok   func(error) bool
	}{
		{"refused acquire of a held lock", func() error { _, err := c.Acquire(ctx, lock, client.AcquireOptions{}); return err }, refused},
		{fmt.Sprintf("refused acquire of a permit, limit %d, all held", workLimit), func() error {
			_, err := c.AcquirePermit(ctx, sem, client.PermitOptions{Limit: workLimit})
			return err
		}, refused},
		{fmt.Sprintf("GET of the semaphore, %d held", workLimit), inspect(workLimit), nil},
		{"GET of the semaphore, 2 held", inspect(2), nil},
	}
	calls = make([]workCall, len(kinds))
	// The first kinds run twice, for half of d each time, in turns, so that
	// a drift of the machine's speed shows on all; the last one after the
	// releases.
	last := len(kinds) - 1
	for range 2 {
		for i, k := range kinds[:last] {
			if err := l.work(ctx, &calls[i], k.name, d/2, k.call, k.ok); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range held[2:] {
		if err := c.ReleasePermit(ctx, sem, p.Token); err != nil {
			return nil, fmt.Errorf("work: release: %w", err)
		}
	}
	return calls, l.work(ctx, &calls[last], kinds[last].name, d, kinds[last].call, kinds[last].ok)
}

// work sends call one at a time for d and adds it, and the scripts the
// nodes ran meanwhile, to w. ok says whether call's error is the expected
// answer (nil: only nil is).
func (l *lab) work(ctx context.Context, w *workCall, name string, d time.Duration, call func() error, ok func(error) bool) error {
	w.name = name
	before, err := evalStats(ctx, l.servers)
	if err != nil {
		return err
	}
	for end := time.Now().Add(d); time.Now().Before(end) && ctx.Err() == nil; w.calls++ {
		if err := call(); err != nil && (ok == nil || !ok(err)) {
			w.errors, w.lastErr = w.errors+1, strings.ReplaceAll(err.Error(), "\n", "; ")
		}
	}
	after, err := evalStats(ctx, l.servers)
	if err != nil {
		return err
	}
	if w.evals == nil {
		w.evals, w.usec = make([]int64, len(after)), make([]int64, len(after))
	}
	for i := range after {
		w.evals[i] += after[i].Calls - before[i].Calls
		w.usec[i] += after[i].Usec - before[i].Usec
	}
	return nil
}

// evalStats reads each node's EVALSHA figures.
func evalStats(ctx context.Context, nodes []*redistest.Server) ([]redistest.CommandStat, error) {
	out := make([]redistest.CommandStat, len(nodes))
	for i, s := range nodes {
		stats, err := s.CommandStats(ctx)
		if err != nil {
			return nil, fmt.Errorf("INFO commandstats of %s: %w", s.Addr(), err)
		}
		out[i] = stats["evalsha"]
	}
	return out, nil
}

// printWork writes the work group's table.
func printWork(w io.Writer, calls []workCall) {
	fmt.Fprintln(w, "\nRedis time per call, one call at a time (EVALSHA usec / calls of INFO commandstats, mean of the nodes)")
	fmt.Fprintln(w, "call\tcalls\tscripts run\terrors\tRedis µs per script run")
	for _, c := range calls {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.1f\n", c.name, c.calls, c.scripts(), c.errors, c.perScript())
		if c.lastErr != "" {
			fmt.Fprintf(w, "  the last error: %s\n", c.lastErr)
		}
	}
}
