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
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9/logging"
)

// floors are the groups of floors that --floors selects.
var floors = []string{"latency", "throughput", "contended", "semaphore", "rw", "multi", "work", "keys", "waiters", "gray"}

type config struct {
	binary      string // the redlockd binary to start; "": go build ./cmd/redlockd
	baseline    string // a redlockd binary to compare the gateway with; "": none
	floors      []string
	c           int // workers of the throughput floors
	duration    time.Duration
	waiters     int
	names       int // names of the keys group, each used once
	nodeTimeout time.Duration
	// The gray floors' workers, and the node timeouts of their gateways.
	grayClients  int
	grayTimeouts []time.Duration
	instructions bool // count the nodes' instructions (see countInstructions)
	// GOMAXPROCS of the gateways it starts, the baseline's too; 0: Go's
	// default (every core).
	gatewayProcs int
}

func (c *config) runs(floor string) bool { return slices.Contains(c.floors, floor) }

func main() {
	serveBareIfAsked()
	logging.Disable() // go-redis's dial errors under load: the runs count their errors
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
	c := &config{grayTimeouts: []time.Duration{50 * time.Millisecond, 200 * time.Millisecond}}
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	which := fs.String("floors", strings.Join(floors, ","), "comma-separated floors to measure: "+strings.Join(floors, ", "))
	fs.StringVar(&c.binary, "redlockd", "", "redlockd `binary` to measure (empty: go build ./cmd/redlockd)")
	fs.StringVar(&c.baseline, "baseline-redlockd", "", "redlockd `binary` whose gateway the throughput group runs too, in turns with the one measured, on the same nodes (empty: none)")
	fs.IntVar(&c.c, "c", 64, "workers of the throughput floors")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long each mode runs, and the window over which idle waiters' Redis commands are counted")
	fs.IntVar(&c.waiters, "waiters", 10000, "waiters of the waiters floor")
	fs.IntVar(&c.names, "names", 100000, "names of the keys floor, each locked and released once (and a tenth as many permit cycles of one semaphore)")
	fs.DurationVar(&c.nodeTimeout, "node-timeout", 50*time.Millisecond, "per-node timeout of the gateway and the library")
	fs.IntVar(&c.grayClients, "gray-clients", 16, "workers of the gray floors")
	fs.IntVar(&c.gatewayProcs, "gateway-procs", max(1, runtime.NumCPU()/2),
		"GOMAXPROCS of the gateways it starts, the baseline's too (0: Go's default, every core): they share the machine with the nodes and the clients, as docs/operations.md says to set it there")
	fs.BoolVar(&c.instructions, "instructions", false, "count the instructions of the nodes' main threads (slows the nodes on many VMs: compare the times of runs with it only with each other)")
	_ = fs.Parse(args) // it exits on a bad flag, 2
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.c < 1 || c.grayClients < 1 || c.waiters < 10 || c.duration <= 0 || c.nodeTimeout <= 0 || c.gatewayProcs < 0 {
		return nil, errors.New("-c and --gray-clients must be at least 1, --waiters at least 10, durations positive, --gateway-procs not negative")
	}
	c.floors = strings.Split(*which, ",")
	for _, f := range c.floors {
		if !slices.Contains(floors, f) {
			return nil, fmt.Errorf("--floors: %q is not one of %s", f, strings.Join(floors, ", "))
		}
	}
	return c, nil
}

// report is what a run measured.
type report struct {
	stamp   string    // what was measured, when and where
	load    [2]string // the load average at the start and at the end
	runs    []result
	work    []workCall
	keys    *keysFigures // names used once
	semKeys *keysFigures // one semaphore's permits, used again and again
	waiting *waiting
	gray    []grayResult
	// Why no Postgres ran, if none did; why no instructions were counted,
	// if none were.
	pgSkipped, noCounters error
}

// modes are the modes of the groups, in the order they run.
func modes(c *config) []mode {
	// The gateway's cycles, the baseline's (with one) and the stack floor's
	// at the gateway's rate alternate, half the duration each time, so that
	// a drift of the machine's speed shows on all.
	gateways := []mode{{group: "throughput", name: gatewayMode, c: c.c, halves: true}}
	if c.baseline != "" {
		gateways = append(gateways, mode{group: "throughput", name: baselineMode, c: c.c, halves: true})
	}
	gateways = append(gateways, mode{group: "throughput", name: stackFloorMode, c: c.c, paced: true, halves: true})
	gateways = slices.Concat(gateways, gateways)
	// The latency group's runs go in two rounds, half the duration each,
	// for the same reason: its floors are ratios of one run over another.
	latency := []mode{
		{group: "latency", name: gatewayMode, c: 1, halves: true},
		{group: "latency", name: redsyncMode, c: 1, halves: true},
		{group: "latency", name: bareMode, c: 1, halves: true},
		{group: "latency", name: setNXMode, c: 1, halves: true},
		{group: "latency", name: pacedRedsyncMode, c: 1, paced: true, halves: true},
		{group: "latency", name: pacedFloorMode, c: 1, paced: true, halves: true},
	}
	contended := mode{group: "contended", name: contendedMode, c: 16, hold: time.Millisecond, wait: 5 * time.Second, halves: true}
	handOverFloor := mode{group: "contended", name: handOverFloorMode, c: 1, hold: time.Millisecond, halves: true}
	return slices.Concat(latency, latency, gateways, []mode{
		{group: "throughput", name: redsyncMode, c: c.c},
		{group: "throughput", name: setNXMode, c: c.c},
		{group: "throughput", name: postgresMode, c: c.c},
		{group: "throughput", name: batchingMode, c: c.c},
		{group: "throughput", name: naiveMode, c: c.c},
		// The contended lock and its hand-over floor alternate, half the
		// duration each time, for the same reason.
		contended, handOverFloor, contended, handOverFloor,
		{group: "contended", name: pgContendedMode, c: 16, hold: time.Millisecond},
		// The permit's cycle and the lock's alternate, half the duration each
		// time, so that a drift of the machine's speed shows on both.
		{group: "semaphore", name: gatewayMode, c: 1, halves: true},
		{group: "semaphore", name: permitMode, c: 1, limit: 4, halves: true},
		{group: "semaphore", name: gatewayMode, c: 1, halves: true},
		{group: "semaphore", name: permitMode, c: 1, limit: 4, halves: true},
		{group: "semaphore", name: semContendedMode, c: 32, limit: 4, hold: 2 * time.Millisecond, wait: 5 * time.Second},
		{group: "rw", name: rwMode, c: 18, readers: 16, hold: time.Millisecond, wait: 5 * time.Second},
		{group: "rw", name: rwWritersMode, c: 18, hold: time.Millisecond, wait: 5 * time.Second},
		{group: "multi", name: multiMode, c: 8, pairs: 10, hold: time.Millisecond, wait: 5 * time.Second},
		{group: "multi", name: inOrderMode, c: 8, pairs: 10, hold: time.Millisecond, wait: 5 * time.Second},
	})
}

// measure runs the floors of c, one mode at a time, each on resources of
// its own (a lock left held by a cycle cut off at the end of a run holds up
// no other run); after an error it returns what it measured before.
func measure(ctx context.Context, c *config, progress io.Writer) (rep *report, err error) {
	l, err := setup(ctx, c)
	if err != nil {
		return nil, err
	}
	defer l.close()
	rep = &report{stamp: stamp(ctx, c, l), load: [2]string{loadAverage()}, pgSkipped: l.pgSkipped, noCounters: l.noCounters}
	defer func() { rep.load[1] = loadAverage() }()
	prefix := fmt.Sprintf("bench-%d-", time.Now().UnixNano())
	// A paced mode's workers each start a cycle once per the mean cycle of a
	// worker in its group's last gateway run: the half of the same round.
	paceOf := map[string]time.Duration{}
	workerCycle := func(x result) time.Duration { return x.meanCycle() * time.Duration(x.c) }
	for i, m := range modes(c) {
		if !c.runs(m.group) || ctx.Err() != nil || (m.backend() == viaPostgres && l.pg == nil) {
			continue
		}
		d := c.duration
		if m.halves {
			d /= 2
		}
		if m.paced {
			if paceOf[m.group] == 0 {
				continue
			}
			m.pace = paceOf[m.group]
		}
		on := l
		if m.name == baselineMode {
			on = l.baseline
		}
		fmt.Fprintf(progress, "%s at C=%d for %v\n", m.name, m.c, d)
		r, err := m.run(ctx, on, fmt.Sprintf("%s%d-", prefix, i), d)
		if err != nil {
			return rep, err
		}
		if r.name == gatewayMode {
			paceOf[r.group] = workerCycle(r)
		}
		var j int
		if rep.runs, j = merge(rep.runs, r); m.paced {
			// The pace of the gateway's halves so far.
			rep.runs[j].pace = workerCycle(rep.runs[slices.IndexFunc(rep.runs, func(x result) bool { return x.group == m.group && x.name == gatewayMode })])
		}
	}
	if c.runs("work") && ctx.Err() == nil {
		fmt.Fprintf(progress, "Redis time per call, each kind for %v\n", c.duration/4)
		if rep.work, err = measureWork(ctx, l, prefix+"work-", c.duration/4); err != nil {
			return rep, err
		}
	}
	if c.runs("keys") && ctx.Err() == nil {
		fmt.Fprintf(progress, "%d names, each locked and released once, at C=%d\n", c.names, c.c)
		if rep.keys, rep.semKeys, err = measureKeysGroup(ctx, l, prefix, c.names, c.c, progress); err != nil {
			return rep, err
		}
	}
	if c.runs("gray") && ctx.Err() == nil {
		var runs []result
		runs, rep.gray, err = measureGray(ctx, l, c, prefix+"gray-", progress)
		if rep.runs = append(rep.runs, runs...); err != nil {
			return rep, err
		}
	}
	if c.runs("waiters") && ctx.Err() == nil {
		fmt.Fprintf(progress, "%d waiters on one lock\n", c.waiters)
		rep.waiting, err = waitMany(ctx, l, prefix+"waiters", c.waiters, c.duration)
	}
	return rep, cmp.Or(err, ctx.Err())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }

// print writes the runs and the floors, and reports whether every floor
// measured holds.
func (r *report) print(w io.Writer) bool {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "%s, load average %s at the start, %s at the end\n\n", r.stamp, r.load[0], r.load[1])
	fmt.Fprintln(tw, "group\tacquire+release cycles\tC\tcycles\terrors\tcycles/s\tp50\tp99\tmax")
	run := map[string]*result{} // by group and name
	for i, x := range r.runs {
		run[x.group+": "+x.name] = &r.runs[i]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s\n", x.group, x.name, x.c, x.cycles, x.errors, x.perSecond(),
			ms(x.lat.pct(0.5)), ms(x.lat.pct(0.99)), ms(x.lat.pct(1)))
		if x.lastErr != "" {
			fmt.Fprintf(tw, "  the last error: %s\n", x.lastErr)
		}
	}
	printCosts(tw, r.runs)
	fmt.Fprintln(tw, "\nfloor\tfigure\tlimit\tverdict")
	all := true
	check := func(name, figure, limit string, ok bool) {
		all = all && ok
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, figure, limit, map[bool]string{true: "pass", false: "FAIL"}[ok])
	}
	// ratio is a over b; a floor on it passes only if b ran: completed more
	// cycles than it failed (else it measured nothing to compare with).
	ratio := func(a, b *result) float64 { return a.perSecond() / max(b.perSecond(), 1e-9) }
	over := func(a, b time.Duration) float64 { return float64(a) / float64(max(b, 1)) }
	if g, s := run["latency: "+gatewayMode], run["latency: "+redsyncMode]; g != nil && s != nil {
		d := g.lat.pct(0.5) - s.lat.pct(0.5)
		check("C=1: gateway p50 - redsync p50", ms(d), "<= 0.35ms", d <= 350*time.Microsecond)
		if b := run["latency: "+bareMode]; b != nil {
			fmt.Fprintf(tw, "C=1: of which the two HTTP hops with no work (bare p50)\t%s\t\tinfo\n", ms(b.lat.pct(0.5)))
		}
	}
	if g, s := run["throughput: "+gatewayMode], run["throughput: "+redsyncMode]; g != nil && s != nil {
		check(fmt.Sprintf("C=%d: gateway / redsync cycles/s", g.c), fmt.Sprintf("%.2f", ratio(g, s)), ">= 1.4", s.cycles > s.errors && ratio(g, s) >= 1.4)
	}
	if b, n := run["throughput: "+batchingMode], run["throughput: "+naiveMode]; b != nil && n != nil {
		check(fmt.Sprintf("C=%d: library batching / naive cycles/s", b.c), fmt.Sprintf("%.2f", ratio(b, n)), ">= 3", n.cycles > n.errors && ratio(b, n) >= 3)
	}
	printCostFloors(tw, run, r.pgSkipped, r.noCounters, check)
	if x := run["contended: "+contendedMode]; x != nil {
		ideal := x.perSecond() * float64(x.hold) / float64(time.Second)
		check(fmt.Sprintf("contended: cycles/s over the ideal %.0f/s (1 / hold)", float64(time.Second)/float64(x.hold)), fmt.Sprintf("%.2f", ideal), ">= 0.75", ideal >= 0.75)
		times, same := handoffs(x.turns)
		p50, p99 := times.pct(0.5), times.pct(0.99)
		check("contended: hand-off p50", ms(p50), "<= 1ms", len(times) > 0 && p50 <= time.Millisecond)
		check("contended: hand-off p99", fmt.Sprintf("%s (max %s)", ms(p99), ms(times.pct(1))), "<= 5ms", len(times) > 0 && p99 <= 5*time.Millisecond)
		check("contended: won by the client that just released", fmt.Sprintf("%.1f%%", 100*same), "<= 10%", same <= 0.1)
	}
	if x := run["semaphore: "+semContendedMode]; x != nil {
		ideal := float64(x.limit) * float64(time.Second) / float64(x.hold)
		fmt.Fprintf(tw, "semaphore: cycles/s over the ideal %.0f/s (limit / hold)\t%.2f\t\tinfo\n", ideal, x.perSecond()/ideal)
		idle, permits := idleWhileWaiting(x.turns, x.limit)
		check("semaphore: permits idle while someone waits", fmt.Sprintf("%.1f%% (%.1f%% of the permits' time)", 100*idle, 100*permits), "<= 5%", x.cycles > 0 && idle <= 0.05)
		times := permitHandoffs(x.turns)
		check("semaphore: hand-off p50 (p99: info)", fmt.Sprintf("%s (%s, %d hand-offs)", ms(times.pct(0.5)), ms(times.pct(0.99)), len(times)),
			"<= 1ms", len(times) > 0 && times.pct(0.5) <= time.Millisecond)
	}
	if p, l := run["semaphore: "+permitMode], run["semaphore: "+gatewayMode]; p != nil && l != nil {
		f := over(p.lat.pct(0.5), l.lat.pct(0.5))
		check("semaphore: C=1: permit p50 / lock p50", fmt.Sprintf("%.2f (%s, %s)", f, ms(p.lat.pct(0.5)), ms(l.lat.pct(0.5))),
			"<= 1.3", p.cycles > 0 && l.cycles > 0 && f <= 1.3)
	}
	if x, b := run["rw: "+rwMode], run["rw: "+rwWritersMode]; x != nil && b != nil {
		reads, rWait := rwFigures(x, true)
		writes, wWait := rwFigures(x, false)
		fmt.Fprintf(tw, "rw: read cycles/s, write cycles/s (all writers: cycles/s)\t%.0f, %.0f (%.0f)\t\tinfo\n",
			float64(len(reads))/x.duration.Seconds(), float64(len(writes))/x.duration.Seconds(), b.perSecond())
		fmt.Fprintf(tw, "rw: reader's wait p99 (POST to 201)\t%s\t\tinfo\n", ms(rWait.pct(0.99)))
		check("rw: writer's wait p99 (POST to 201; all writers: p99)", fmt.Sprintf("%s (%s), %d writes, %d errors", ms(wWait.pct(0.99)), ms(waitP99(b)), len(writes), x.errors),
			"writers served", len(writes) > 0 && x.errors == 0)
	}
	if x, b := run["multi: "+multiMode], run["multi: "+inOrderMode]; x != nil && b != nil {
		check("multi: cycles/s, wait p99 (one by one in name order: cycles/s, wait p99)",
			fmt.Sprintf("%.0f, %s (%.0f, %s), %d errors", x.perSecond(), ms(waitP99(x)), b.perSecond(), ms(waitP99(b)), x.errors+b.errors),
			"all served", x.cycles > 0 && x.errors == 0)
	}
	if len(r.work) > 1 {
		lock, permit := r.work[0], r.work[1]
		f := permit.perScript() / max(lock.perScript(), 1e-9)
		check(fmt.Sprintf("work: refused permit (limit %d, all held) / refused lock, Redis µs per script run", workLimit),
			fmt.Sprintf("%.2f (%.1f, %.1f µs)", f, permit.perScript(), lock.perScript()), "<= 3", lock.scripts() > 0 && permit.scripts() > 0 && f <= 3)
	}
	keys := func(k *keysFigures, what, more, limit string, ok bool) {
		check(fmt.Sprintf("keys: %s (%d errors): keys left on a node, of which without a TTL", what, k.errors),
			fmt.Sprintf("%d, %d (longest TTL %v%s)", k.keys, k.forever, k.longest.Round(time.Minute), more),
			limit, k.keys > 0 && k.forever == 0 && ok)
		if k.lastErr != "" {
			fmt.Fprintf(tw, "  the last error: %s\n", k.lastErr)
		}
	}
	if k := r.keys; k != nil {
		keys(k, fmt.Sprintf("%d names used once", k.cycles), fmt.Sprintf("; %.0f bytes a name", float64(k.bytes)/float64(max(k.cycles, 1))), "0 without a TTL", true)
	}
	if k := r.semKeys; k != nil {
		keys(k, fmt.Sprintf("a semaphore of limit %d, %d permit cycles", semKeysLimit, k.cycles), "",
			fmt.Sprintf("<= %d, 0 without a TTL", semKeysMost), k.keys <= semKeysMost)
	}
	if x := r.waiting; x != nil {
		check("waiters: gateway peak RSS (VmHWM)", fmt.Sprintf("%d MB (now %d)", x.during.status.VmHWM>>20, x.during.status.VmRSS>>20), "<= 450 MB",
			x.during.status.VmHWM > 0 && x.during.status.VmHWM <= 450<<20)
		check(fmt.Sprintf("waiters: %d served, %d timed out after %v", x.waiters-x.short, x.short, shortWait),
			fmt.Sprintf("%d, %d (%d early, %d other)", x.served, x.timedOut, x.early, x.other), "all",
			x.served == x.waiters-x.short && x.timedOut == x.short && x.early == 0)
		check("waiters: Redis commands/s while they wait", fmt.Sprintf("%.1f", x.idleCommands), "<= 100", x.idleCommands <= 100)
		rss, stacks, goroutines := x.perWaiter()
		fmt.Fprintf(tw, "waiters: the gateway's memory per waiting acquire: peak RSS; goroutine stacks (goroutines)\t%.1f KB; %.1f KB (%.2f)\t\tinfo\n",
			rss/1024, stacks/1024, goroutines)
	}
	for _, g := range r.gray {
		h := run["gray: "+grayName(g.nodeTimeout, scenarios[0].name)]
		for _, s := range scenarios[1:] {
			if x := run["gray: "+grayName(g.nodeTimeout, s.name)]; h != nil && x != nil {
				p50, p99, thr := over(x.lat.pct(0.5), h.lat.pct(0.5)), over(x.lat.pct(0.99), h.lat.pct(0.99)), ratio(x, h)
				check(fmt.Sprintf("gray %v, %s: p50, p99, cycles/s over healthy", g.nodeTimeout, s.name),
					fmt.Sprintf("%.2f, %.2f, %.2f (%d errors)", p50, p99, thr, x.errors), "<= 1.5, <= 3, >= 0.6",
					h.cycles > 0 && x.cycles > 0 && x.errors == 0 && p50 <= 1.5 && p99 <= 3 && thr >= 0.6)
			}
		}
		limit := g.nodeTimeout + 25*time.Millisecond
		check(fmt.Sprintf("gray %v, 3 of 5 paused: acquire's 503 p50, max", g.nodeTimeout),
			fmt.Sprintf("%s, %s (%d of %d tries)", ms(g.to503.pct(0.5)), ms(g.to503.pct(1)), len(g.to503), g.tries), "max <= "+ms(limit),
			g.tries > 0 && len(g.to503) == g.tries && g.to503.pct(1) <= limit)
		if g.lastErr != "" {
			fmt.Fprintf(tw, "  the last other answer: %s\n", g.lastErr)
		}
	}
	printProposed(tw, run)
	if len(r.work) > 0 {
		printWork(tw, r.work)
	}
	return all
}

// waitP99 is the wait p99 of r's writers: of every cycle, in a run with no
// readers.
func waitP99(r *result) time.Duration {
	_, waits := rwFigures(r, false)
	return waits.pct(0.99)
}

// rwFigures are the cycles of r by readers (read) or writers, and their
// waits: from the acquire sent to its 201 read.
func rwFigures(r *result, read bool) (turns []turn, waits sample) {
	for _, t := range r.turns {
		if t.read == read {
			turns, waits = append(turns, t), append(waits, t.acquired.Sub(t.start))
		}
	}
	slices.Sort(waits)
	return turns, waits
}
