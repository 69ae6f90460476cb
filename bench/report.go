package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// report is what a run measured.
type report struct {
	runs      []result
	contended *contended
	waiting   *waiting
}

// measure runs the floors of c, one mode at a time; after an error it
// returns what it measured before, if anything. Every run locks
// resources of its own: a lock that a cycle cut off at the end of a run left
// held holds up no other run.
func measure(ctx context.Context, c *config, progress io.Writer) (rep *report, err error) {
	l, err := setup(ctx, c)
	if err != nil {
		return nil, err
	}
	defer l.close()
	rep = &report{}
	prefix := fmt.Sprintf("bench-%d-", time.Now().UnixNano())
	modes := []string{"gateway over HTTP", "redsync", "library, batching", "library, naive"}
	var runs []result // mode and C
	if c.runs("latency") {
		runs = append(runs, result{name: modes[0], c: 1}, result{name: modes[1], c: 1})
	}
	if c.runs("throughput") {
		for _, m := range modes {
			runs = append(runs, result{name: m, c: c.c})
		}
	}
	for i, x := range runs {
		p := fmt.Sprintf("%s%d-", prefix, i)
		var cy cycle
		var done func()
		switch x.name {
		case modes[0]:
			cy, done, err = gatewayCycle(l.url, p, x.c)
		case modes[1]:
			cy, done, err = redsyncCycle(l.nodes, p, x.c)
		default:
			cy, done, err = libraryCycle(l.nodes, p, x.c, x.name == modes[3], c.nodeTimeout)
		}
		if err != nil {
			return rep, err
		}
		fmt.Fprintf(progress, "%s at C=%d for %v\n", x.name, x.c, c.duration)
		rep.runs = append(rep.runs, runCycles(ctx, x.name, x.c, c.duration, cy))
		done()
	}
	if c.runs("contended") && ctx.Err() == nil {
		fmt.Fprintf(progress, "16 clients on one lock for %v\n", c.duration)
		r := contend(ctx, l.url, prefix+"contended", 16, time.Millisecond, c.duration)
		rep.contended = &r
	}
	if c.runs("waiters") && ctx.Err() == nil {
		fmt.Fprintf(progress, "%d waiters on one lock\n", c.waiters)
		rep.waiting, err = waitMany(ctx, l, prefix+"waiters", c.waiters, c.idle)
	}
	if err == nil {
		err = ctx.Err()
	}
	return rep, err
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }

// print writes the runs and the floors, and reports whether every floor
// measured holds.
func (r *report) print(w io.Writer) bool {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	runs := r.runs
	if x := r.contended; x != nil {
		cr := x.run
		cr.name += fmt.Sprintf(" (one lock, hold 1ms, wait_ms; hand-off max %s)", ms(pct(x.handoff, 1)))
		runs = append(runs, cr)
	}
	fmt.Fprintln(tw, "acquire+release cycles\tC\tcycles\terrors\tcycles/s\tp50\tp99\tmax")
	for _, x := range runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s\n", x.name, x.c, x.cycles, x.errors, x.perSecond(), ms(x.p50), ms(x.p99), ms(x.max))
		if x.lastErr != "" {
			fmt.Fprintf(tw, "  the last error: %s\n", x.lastErr)
		}
	}
	fmt.Fprintln(tw, "\nfloor\tfigure\tlimit\tverdict")
	all := true
	check := func(name, figure, limit string, ok bool) {
		verdict := map[bool]string{true: "pass", false: "FAIL"}[ok]
		all = all && ok
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, figure, limit, verdict)
	}
	find := func(name string, one bool) *result {
		for i := range r.runs {
			if x := &r.runs[i]; x.name == name && one == (x.c == 1) {
				return x
			}
		}
		return nil
	}
	ratio := func(a, b *result) float64 { return a.perSecond() / max(b.perSecond(), 1e-9) }
	if g, s := find("gateway over HTTP", true), find("redsync", true); g != nil && s != nil {
		check("C=1: gateway p50 - redsync p50", ms(g.p50-s.p50), "<= 0.35ms", g.p50-s.p50 <= 350*time.Microsecond)
	}
	if g, s := find("gateway over HTTP", false), find("redsync", false); g != nil && s != nil {
		check(fmt.Sprintf("C=%d: gateway / redsync cycles/s", g.c), fmt.Sprintf("%.2f", ratio(g, s)), ">= 1.4", ratio(g, s) >= 1.4)
	}
	if b, n := find("library, batching", false), find("library, naive", false); b != nil && n != nil {
		check(fmt.Sprintf("C=%d: library batching / naive cycles/s", b.c), fmt.Sprintf("%.2f", ratio(b, n)), ">= 3", ratio(b, n) >= 3)
	}
	if x := r.contended; x != nil {
		p50, p99 := pct(x.handoff, 0.5), pct(x.handoff, 0.99)
		check("contended: hand-off p50", ms(p50), "<= 1ms", len(x.handoff) > 0 && p50 <= time.Millisecond)
		check("contended: hand-off p99", ms(p99), "<= 5ms", len(x.handoff) > 0 && p99 <= 5*time.Millisecond)
		check("contended: won by the client that just released", fmt.Sprintf("%.1f%%", 100*x.same), "<= 10%", x.same <= 0.1)
	}
	if x := r.waiting; x != nil {
		check("waiters: gateway peak RSS (VmHWM)", fmt.Sprintf("%d MB (now %d)", x.hwmKB>>10, x.rssKB>>10), "<= 450 MB",
			x.hwmKB > 0 && x.hwmKB <= 450<<10)
		check(fmt.Sprintf("waiters: %d served, %d timed out after %v", x.waiters-x.short, x.short, shortWait),
			fmt.Sprintf("%d, %d (%d early, %d other)", x.served, x.timedOut, x.early, x.other), "all",
			x.served == x.waiters-x.short && x.timedOut == x.short && x.early == 0)
		check("waiters: Redis commands/s while they wait", fmt.Sprintf("%.1f", x.idleCommands), "<= 100", x.idleCommands <= 100)
	}
	return all
}
