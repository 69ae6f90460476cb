package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// TestMain makes the test binary the bare server too, as main does.
func TestMain(m *testing.M) {
	serveBareIfAsked()
	os.Exit(m.Run())
}

// TestSmoke runs every mode briefly, so that the tool cannot rot: each
// (the semaphore ones, the baseline gateway's and Postgres's too, Postgres's
// when it is installed) completes cycles without errors (with a paused or
// slow minority too), the Redis modes' commands are counted,
// every waiter is served or times out after its wait, the acquires with 3
// of 5 nodes paused get 503, and the floors table is printed. The figures themselves
// are not checked: a short run on a shared machine says nothing about them.
func TestSmoke(t *testing.T) {
	redistest.Slow(t)
	// One node timeout for every gateway and library, the gray one too:
	// only the injected faults (a paused node, or one slow by twice the
	// node timeout) time a node out, not a loaded machine.
	// Each mode runs 1s: long enough for cycles to end within it on a
	// machine whose load average is several times its cores.
	const nodeTimeout = time.Second
	// The baseline gateway is a build of this tree too: the smoke run checks
	// that the A/B runs, not what it finds.
	baseline := filepath.Join(t.TempDir(), "redlockd")
	if out, err := exec.Command("go", "build", "-o", baseline, "github.com/redlockd/redlockd/cmd/redlockd").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/redlockd: %v\n%s", err, out)
	}
	c, err := parse([]string{"-c", "4", "--duration", "1s", "--waiters", "200", "--names", "50", "--node-timeout", nodeTimeout.String(),
		"--baseline-redlockd", baseline, "--instructions", "--gateway-procs", "1"})
	if err != nil {
		t.Fatal(err)
	}
	c.grayTimeouts = []time.Duration{nodeTimeout}
	var progress bytes.Buffer
	// Minutes, where a run takes about one: a step that hangs fails with the
	// steps done so far instead of running into the suite's timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	rep, err := measure(ctx, c, &progress)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		t.Fatalf("%v; the steps so far:\n%s", err, progress.String())
	}
	// Postgres's two runs when it is installed (scripts/install-postgres.sh).
	var names []string
	for _, r := range rep.runs {
		names = append(names, r.group+": "+r.name)
	}
	want := []string{"latency: " + gatewayMode, "latency: " + redsyncMode, "latency: " + bareMode, "latency: " + setNXMode,
		"latency: " + pacedRedsyncMode, "latency: " + pacedFloorMode,
		"throughput: " + gatewayMode, "throughput: " + baselineMode, "throughput: " + stackFloorMode, "throughput: " + redsyncMode, "throughput: " + setNXMode,
		"throughput: " + batchingMode, "throughput: " + naiveMode, "contended: " + contendedMode, "contended: " + handOverFloorMode,
		"semaphore: " + gatewayMode, "semaphore: " + permitMode, "semaphore: " + semContendedMode,
		"rw: " + rwMode, "rw: " + rwWritersMode, "multi: " + multiMode, "multi: " + inOrderMode}
	if rep.pgSkipped == nil {
		want = slices.Insert(want, 11, "throughput: "+postgresMode)
		want = slices.Insert(want, 16, "contended: "+pgContendedMode)
	} else {
		t.Logf("no Postgres: %v", rep.pgSkipped)
	}
	for _, s := range scenarios {
		want = append(want, "gray: "+grayName(nodeTimeout, s.name))
	}
	// Both gateways run at the GOMAXPROCS asked for, as their /metrics say.
	if !regexp.MustCompile(`^gateway commit \S+ at GOMAXPROCS 1 \(baseline .* at GOMAXPROCS 1\), `).MatchString(rep.stamp) {
		t.Errorf("stamp %q: want both gateways at GOMAXPROCS 1", rep.stamp)
	}
	if !slices.Equal(names, want) || rep.waiting == nil || len(rep.gray) != 1 {
		t.Fatalf("runs:\n%s\nwant:\n%s\nwaiters %v, gray %v", strings.Join(names, "\n"), strings.Join(want, "\n"), rep.waiting, rep.gray)
	}
	for _, r := range rep.runs {
		if r.cycles == 0 || r.errors != 0 {
			t.Errorf("%s at C=%d: %d cycles, %d errors (the last: %s)", r.name, r.c, r.cycles, r.errors, r.lastErr)
		}
		// What the servers spent: the commands of the Redis modes, with
		// script calls for the gateway's, and time inside those calls (the
		// CPU time, in clock ticks, may be 0 in a short run).
		p := r.cost.perCycle(r.cycles, r.nodes)
		switch {
		case r.group == "gray" || r.nodes == 0:
		case p.commands < 1 || (r.backend() == viaGateway && p.scripts < 1):
			t.Errorf("%s: %.1f Redis commands and %.1f script calls per node per cycle", r.name, p.commands, p.scripts)
		case p.scripts > 0 && p.inScripts <= 0:
			t.Errorf("%s: %.1f script calls per node per cycle, and no time inside them", r.name, p.scripts)
		case rep.noCounters == nil && (p.redisKinstr < 10*float64(r.nodes) || p.redisKinstr > 10_000*float64(r.nodes)):
			// A command costs Redis thousands of instructions, a cycle
			// runs two or more on each node it uses.
			t.Errorf("%s: %.1f thousand instructions of %d nodes per cycle", r.name, p.redisKinstr, r.nodes)
		}
	}
	if rep.noCounters != nil {
		t.Logf("no instruction counts: %v", rep.noCounters)
	}
	// Paced to the gateway's rate, redsync, the fenced floor and the stack
	// floor (faster alone) start no more cycles in as long a run: one more
	// per worker in each half at most, as a pace rounds down.
	for _, p := range []result{rep.runs[4], rep.runs[5], rep.runs[8]} {
		g := rep.runs[slices.IndexFunc(rep.runs, func(x result) bool { return x.group == p.group && x.name == gatewayMode })]
		if p.pace != g.meanCycle()*time.Duration(g.c) || p.cycles > g.cycles+2*g.c {
			t.Errorf("%s: %d cycles, a cycle per %v per worker; %s: %d cycles in %v at C=%d", p.name, p.cycles, p.pace, g.name, g.cycles, g.duration, g.c)
		}
	}
	if w := rep.waiting; w.served != w.waiters-w.short || w.timedOut != w.short || w.early != 0 || w.during.status.VmHWM == 0 {
		t.Errorf("waiters: %+v", *w)
	}
	// Each waiting acquire holds its handler's goroutine and net/http's
	// background reader of its connection.
	if _, stacks, goroutines := rep.waiting.perWaiter(); goroutines < 1.5 || goroutines > 2.5 || stacks < 4<<10 {
		t.Errorf("waiters: %.2f goroutines and %.0f bytes of goroutine stacks per waiting acquire, want about 2 and more than 4 KB", goroutines, stacks)
	}
	if len(rep.work) != 4 {
		t.Errorf("work: %d kinds of calls, want 4", len(rep.work))
	}
	for _, w := range rep.work {
		if w.calls == 0 || w.scripts() == 0 || w.errors != 0 {
			t.Errorf("work, %s: %+v", w.name, w)
		}
	}
	if k := rep.keys; k == nil || k.errors != 0 || k.keys < k.cycles || k.forever != 0 {
		t.Errorf("keys: %+v", k)
	}
	if k := rep.semKeys; k == nil || k.errors != 0 || k.keys == 0 || k.keys > semKeysMost || k.forever != 0 {
		t.Errorf("keys, a semaphore: %+v", k)
	}
	if g := rep.gray[0]; len(g.to503) != g.tries {
		t.Errorf("3 of 5 paused: %d of %d acquires got 503, the last other: %s", len(g.to503), g.tries, g.lastErr)
	}
	var out bytes.Buffer
	rep.print(&out)
	more := []string{"C=1: Redis commands per node per cycle, gateway / redsync", "C=4: Redis CPU per cycle, gateway / redsync",
		"C=1: Redis CPU per cycle, gateway / redsync at the gateway's rate",
		"C=1: Redis CPU per cycle, gateway / the fenced floor's scripts at the gateway's rate",
		"C=1: the gateway's Redis commands per node per cycle by name", "C=4: gateway CPU per cycle / the baseline's",
		"bare SET NX (1 Redis): C=4 cycles/s", "C=1: gateway p50 / the physical floor", "contended: cycles/s over the ideal",
		"C=1: gateway p50 / (bare HTTP p50 + redsync p50)", "contended: cycles/s over the hand-over floor's", "contended: the hand-over floor's path",
		"C=4: gateway CPU per cycle / the stack floor's at the gateway's rate", "C=4: Redis CPU per cycle, gateway / the stack floor's at the gateway's rate",
		"C=4: the stack floor's CPU per cycle / the baseline's"}
	if rep.pgSkipped == nil {
		more = append(more, "contended: cycles/s, wait p99 over Postgres advisory locks'", "Postgres advisory locks: C=4 cycles/s")
	} else {
		more = append(more, "skipped: "+errNoPostgres.Error())
	}
	if rep.noCounters == nil {
		more = append(more, "C=1: Redis instructions per cycle (main threads), gateway / redsync",
			"C=1: Redis instructions per cycle (main threads), gateway / the fenced floor's scripts at the gateway's rate")
	} else {
		more = append(more, "not counted: ")
	}
	for _, floor := range append([]string{"C=1: gateway p50 - redsync p50", "C=4: gateway / redsync", "C=4: library batching / naive",
		"hand-off p99", "rw: writer's wait p99", "peak RSS", "semaphore: permits idle while someone waits", "semaphore: hand-off p50", "semaphore: C=1: permit p50 / lock p50", "multi: cycles/s, wait p99", "work: refused permit (limit 256, all held) / refused lock", "keys: 50 names used once", "keys: a semaphore of limit 4, 5 permit cycles", "GET of the semaphore, 2 held", "Redis commands/s while they wait", "memory per waiting acquire",
		fmt.Sprintf("gray %v, 2 of 5 slow: p50, p99, cycles/s over healthy", nodeTimeout), fmt.Sprintf("gray %v, 3 of 5 paused: acquire's 503", nodeTimeout)}, more...) {
		if !strings.Contains(out.String(), floor) {
			t.Errorf("the table lacks %q:\n%s", floor, out.String())
		}
	}
	if _, err := parse([]string{"--floors", "latency,nope"}); err == nil {
		t.Error("--floors nope: accepted")
	}
}

// TestSemaphoreFigures checks the semaphore floors' arithmetic on turns
// made up for it: limit 2, three workers, the third waiting from the start.
func TestSemaphoreFigures(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cycle := func(w, start, acquired, releasing, released int) turn {
		return turn{worker: w, start: at(start), acquired: at(acquired), releasing: at(releasing), released: at(released)}
	}
	turns := []turn{cycle(0, 0, 1, 5, 6), cycle(1, 0, 1, 7, 8), cycle(2, 0, 7, 12, 13), cycle(0, 6, 9, 14, 15)}
	// From the first 201 (1) to worker 1's last 204 (8), a permit is held
	// from its 201 to its 204: fewer than 2 held while someone waits over
	// [6, 7] only, and one of the two permits then.
	if got, permits := idleWhileWaiting(turns, 2); math.Abs(got-1.0/7) > 1e-9 || math.Abs(permits-1.0/14) > 1e-9 {
		t.Errorf("idle while waiting: %v and %v of the permits' time, want 1/7 and 1/14", got, permits)
	}
	// The first two did not wait for a release; the others, 1ms each from
	// the 204 they waited for (6, 8) to their 201 (7, 9).
	if got := permitHandoffs(turns); !slices.Equal(got, sample{time.Millisecond, time.Millisecond}) {
		t.Errorf("hand-offs: %v", got)
	}
}

// TestHandoffsByHalf: the hand-offs of a contended mode run in halves are
// those within each half: none from the first half's last 204 to the
// second half's first 201, while the lock was idle.
func TestHandoffsByHalf(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cycle := func(w, start, acquired, released int) turn {
		return turn{worker: w, start: at(start), acquired: at(acquired), releasing: at(released - 1), released: at(released)}
	}
	first := result{turns: []turn{cycle(0, 0, 1, 3), cycle(1, 0, 4, 6)}}
	second := result{turns: []turn{cycle(1, 5000, 5001, 5003), cycle(0, 5000, 5005, 5007)}}
	first.add(second)
	// 1ms (3 to 4) and 2ms (5003 to 5005); the 4995ms from 6 to 5001 is no
	// hand-off, and neither pair of the same worker (1, then 1) counts.
	if times, same := handoffs(first.turns); !slices.Equal(times, sample{time.Millisecond, 2 * time.Millisecond}) || same != 0 {
		t.Errorf("hand-offs %v, won by the last holder %v; want [1ms 2ms] and 0", times, same)
	}
}

// TestProposedFigures checks the proposed targets' arithmetic on runs made
// up for it: C=1 p50s of 1.2ms (gateway), 0.2ms (bare HTTP) and 0.4ms
// (redsync); a contended run of 500 cycles in 1s whose holds were slept
// 1.2ms each, and the hand-over floor's 600 in 1s (its cycle p50 1.6ms);
// Redis CPU of 600µs (gateway) and 500µs (the fenced floor; at C=64 the
// stack floor) per cycle, over 2 cycles of 2 nodes; at C=64, one target
// that fails.
func TestProposedFigures(t *testing.T) {
	lat := func(name string, p50 time.Duration) *result {
		return &result{mode: mode{group: "latency", name: name, c: 1}, cycles: 1, duration: time.Second, lat: sample{p50}}
	}
	t0 := time.Now()
	// cycles in a second, each acquired after waiting wait.
	contended := func(name string, c, cycles int, wait time.Duration) *result {
		r := &result{mode: mode{group: "contended", name: name, c: c, hold: time.Millisecond}, cycles: cycles, duration: time.Second}
		for range cycles {
			r.turns = append(r.turns, turn{start: t0.Add(-wait), acquired: t0, releasing: t0.Add(1200 * time.Microsecond)})
		}
		return r
	}
	// 2 cycles on 2 nodes, each node spending perNode, a third of it
	// inside script calls.
	spending := func(r *result, perNode time.Duration) *result {
		r.cycles, r.nodes, r.cost = 2, 2, cost{commands: []int64{10, 10}, scripts: []int64{4, 4}, redis: []time.Duration{perNode, perNode},
			inScripts: []time.Duration{perNode / 3, perNode / 3}}
		return r
	}
	floorRun := contended(handOverFloorMode, 1, 600, 0)
	floorRun.lat = sample{1600 * time.Microsecond}
	g := spending(lat(gatewayMode, 1200*time.Microsecond), 600*time.Microsecond)
	floor := spending(lat(pacedFloorMode, time.Millisecond), 500*time.Microsecond)
	// At C=64, the gateway's process spends 130 µs per cycle, the stack
	// floor's 100.
	tg := spending(&result{mode: mode{group: "throughput", name: gatewayMode, c: 64}, duration: time.Second}, 600*time.Microsecond)
	tf := spending(&result{mode: mode{group: "throughput", name: stackFloorMode, c: 64}, duration: time.Second}, 500*time.Microsecond)
	tg.cost.server, tf.cost.server = 260*time.Microsecond, 200*time.Microsecond
	run := map[string]*result{"latency: " + gatewayMode: g, "latency: " + pacedFloorMode: floor,
		"throughput: " + gatewayMode: tg, "throughput: " + stackFloorMode: tf,
		"latency: " + bareMode: lat(bareMode, 200*time.Microsecond), "latency: " + redsyncMode: lat(redsyncMode, 400*time.Microsecond),
		"contended: " + contendedMode: contended(contendedMode, 16, 500, 30*time.Millisecond), "contended: " + handOverFloorMode: floorRun,
		"contended: " + pgContendedMode: contended(pgContendedMode, 16, 600, 20*time.Millisecond)}
	var out strings.Builder
	printProposed(&out, run)
	// 1.2 / (0.2 + 0.4) = 2.0; 500 / 600 = 0.83, the floor's path (1.6 -
	// 1.2) / (0.2 / 2 + 0.4 / 2) = 1.33; 600 / 500 = 1.2, and so inside
	// the script calls (200 / 166: µs rounded down per node); waits of 30 ms
	// at 500/s and of 20 ms at 600/s, 15 and 12 hand-overs: 1.25.
	for _, want := range []string{"2.00 (1.200ms / 0.600ms)\t<= 2.0\tproposed: pass", "(holds slept p50 1.200ms, 1.200ms)\t0.83 (500 / 600/s)\t>= 0.75\tproposed: pass",
		"redsync p50 / 2\t1.33 (0.400ms / 0.300ms)\t\tinfo",
		"1.20 (600.0 / 500.0 µs, 2 nodes)\t<= 1.25\tproposed: pass",
		"inside script calls per cycle, gateway / the fenced floor's scripts at the gateway's rate\t1.20 (200.0 / 166.0 µs, 2 nodes)\t\tinfo",
		"wait p99 in hand-overs (wait p99 × cycles/s) over Postgres advisory locks'\t1.25 (15.0 / 12.0)\t<= 1.5\tproposed: pass",
		"C=64: gateway CPU per cycle / the stack floor's at the gateway's rate (cycles/s 2 / 2)\t1.30 (130.0 / 100.0 µs)\t<= 1.25\tproposed: FAIL",
		"C=64: Redis CPU per cycle, gateway / the stack floor's at the gateway's rate\t1.20 (600.0 / 500.0 µs, 2 nodes)\t<= 1.25\tproposed: pass"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the proposed targets lack %q:\n%s", want, out.String())
		}
	}
}

// TestBaselineRatios: a floor over a baseline run (redsync, the naive
// library) fails when the baseline failed more cycles than it completed,
// however large the ratio: it measured nothing to compare with.
func TestBaselineRatios(t *testing.T) {
	run := func(name string, cycles, errors int) result {
		return result{mode: mode{group: "throughput", name: name, c: 64}, cycles: cycles, errors: errors, duration: time.Second}
	}
	for _, c := range []struct {
		cycles, errors int
		ratio, verdict string
	}{
		{1000, 10, "4.00", "pass"},
		{1, 90000, "4000.00", "FAIL"},
	} {
		r := &report{runs: []result{run(gatewayMode, 4000, 0), run(redsyncMode, c.cycles, c.errors),
			run(batchingMode, 4000, 0), run(naiveMode, c.cycles, c.errors)}}
		var out bytes.Buffer
		r.print(&out)
		for _, floor := range []string{`C=64: gateway / redsync cycles/s +` + c.ratio + ` +>= 1\.4 +`, `C=64: library batching / naive cycles/s +` + c.ratio + ` +>= 3 +`} {
			if !regexp.MustCompile(`(?m)^` + floor + c.verdict + `$`).MatchString(out.String()) {
				t.Errorf("the floors lack %q, %s:\n%s", floor, c.verdict, out.String())
			}
		}
	}
}

// TestWorkPausesAfterErrors: a worker whose cycles fail pauses before the
// next (errorPause) instead of spinning on the failing server; a worker
// whose cycles succeed does not pause.
func TestWorkPausesAfterErrors(t *testing.T) {
	failing := func(context.Context, string) (func(context.Context) error, error) {
		return nil, errors.New("refused")
	}
	m, d := mode{c: 4}, 300*time.Millisecond
	r := m.drive(t.Context(), failing, failing, "x", d)
	if most := m.c * int(d/(errorPause/2)+1); r.errors == 0 || r.errors > most || len(r.turns) > 0 {
		t.Errorf("%d workers failing for %s: %d errors, %d cycles; want 1-%d errors, no cycle", m.c, d, r.errors, len(r.turns), most)
	}

	free := func(context.Context, string) (func(context.Context) error, error) {
		return func(context.Context) error { return nil }, nil
	}
	least := 10 * m.c * int(d/errorPause) // well over what a pause after every cycle allows
	if r := m.drive(t.Context(), free, free, "x", d); r.errors > 0 || len(r.turns) <= least {
		t.Errorf("%d workers for %s whose cycles succeed: %d cycles, %d errors; want more than %d cycles (the pause only follows an error)",
			m.c, d, len(r.turns), r.errors, least)
	}
}
