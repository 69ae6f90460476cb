package main

import (
	"fmt"
	"io"
	"time"
)

// printProposed writes the targets that docs/measuring.md ("Proposed
// targets") proposes in place of the floors that no build can meet on a
// machine where the 5 nodes, the gateway and the clients share a few cores:
// each compares the gateway with the same work done without it, measured in
// the same run. They are not floors: their verdicts do not change the exit
// code.
func printProposed(w io.Writer, run map[string]*result) {
	line := func(name, figure, limit string, ok bool) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", name, figure, limit, map[bool]string{true: "proposed: pass", false: "proposed: FAIL"}[ok])
	}
	if g, h, s := run["latency: "+gatewayMode], run["latency: "+bareMode], run["latency: "+redsyncMode]; g != nil && h != nil && s != nil && h.cycles > 0 && s.cycles > 0 {
		// The same topology without the gateway: its two HTTP hops with no
		// work, and redsync's two rounds of 5 nodes.
		alone := h.lat.pct(0.5) + s.lat.pct(0.5)
		f := float64(g.lat.pct(0.5)) / float64(max(alone, 1))
		line("C=1: gateway p50 / (bare HTTP p50 + redsync p50)", fmt.Sprintf("%.2f (%s / %s)", f, ms(g.lat.pct(0.5)), ms(alone)), "<= 2.0", g.cycles > 0 && f <= 2)

		// The nodes' CPU per cycle over the least a fenced cycle asks of
		// them, at the same rate (see pacedFloorMode): what the lock's logic
		// and the gateway add to what fencing itself costs.
		if x := run["latency: "+pacedFloorMode]; x != nil && x.cycles > 0 && g.cost.commands != nil && x.cost.commands != nil {
			r, figure := redisCPUOver(g, x)
			line(fmt.Sprintf("C=1: Redis CPU per cycle, gateway / the fenced floor's scripts at the gateway's rate (a cycle per %s)", ms(x.pace)),
				figure, "<= 1.25", g.cycles > 0 && r <= 1.25)
			// Of which the scripts' own work: where the two differ.
			_, figure = inScriptsOver(g, x)
			fmt.Fprintf(w, "C=1: Redis time inside script calls per cycle, gateway / the fenced floor's scripts at the gateway's rate\t%s\t\tinfo\n", figure)
			// The same work counted in instructions, which the machine's load
			// barely moves.
			if figure, ok := redisKinstrOver(g, x); ok {
				fmt.Fprintf(w, "C=1: Redis instructions per cycle (main threads), gateway / the fenced floor's scripts at the gateway's rate\t%s\t\tinfo\n", figure)
			}
		}
	}

	// The same cycles through the gateway's stack with none of its logic, at
	// the gateway's rate (see stackFloorMode): what the gateway's logic adds
	// to its CPU, and the lock's scripts to the nodes'.
	if g, x := run["throughput: "+gatewayMode], run["throughput: "+stackFloorMode]; g != nil && x != nil && g.cycles > 0 && x.cycles > 0 && g.cost.commands != nil && x.cost.commands != nil {
		gp, xp := g.cost.perCycle(g.cycles, g.nodes), x.cost.perCycle(x.cycles, x.nodes)
		f := gp.serverCPU / max(xp.serverCPU, 1e-9)
		line(fmt.Sprintf("C=%d: gateway CPU per cycle / the stack floor's at the gateway's rate (cycles/s %.0f / %.0f)", g.c, g.perSecond(), x.perSecond()),
			fmt.Sprintf("%.2f (%.1f / %.1f µs)", f, gp.serverCPU, xp.serverCPU), "<= 1.25", f <= 1.25)
		r, figure := redisCPUOver(g, x)
		line(fmt.Sprintf("C=%d: Redis CPU per cycle, gateway / the stack floor's at the gateway's rate", g.c), figure, "<= 1.25", r <= 1.25)
		_, figure = inScriptsOver(g, x)
		fmt.Fprintf(w, "C=%d: Redis time inside script calls per cycle, gateway / the stack floor's at the gateway's rate\t%s\t\tinfo\n", g.c, figure)
	}

	x := run["contended: "+contendedMode]
	if x == nil || x.cycles == 0 {
		return
	}
	// A hand-over's critical path is the hold, the release's request in,
	// one round of the nodes and the next holder's answer out: the floor
	// runs that path, paced by the same hold, with none of the lock's logic.
	if f := run["contended: "+handOverFloorMode]; f != nil && f.cycles > 0 {
		c := x.perSecond() / f.perSecond()
		line(fmt.Sprintf("contended: cycles/s over the hand-over floor's (holds slept p50 %s, %s)", ms(slept(x.turns).pct(0.5)), ms(slept(f.turns).pct(0.5))),
			fmt.Sprintf("%.2f (%.0f / %.0f/s)", c, x.perSecond(), f.perSecond()), ">= 0.75", c >= 0.75)
		// The floor's path, paced by its holds, over the same path summed
		// from back-to-back runs: what the machine's idle CPUs add.
		if h, s := run["latency: "+bareMode], run["latency: "+redsyncMode]; h != nil && s != nil && h.cycles > 0 && s.cycles > 0 {
			path, summed := f.lat.pct(0.5)-slept(f.turns).pct(0.5), h.lat.pct(0.5)/2+s.lat.pct(0.5)/2
			fmt.Fprintf(w, "contended: the hand-over floor's path (cycle p50 less hold slept p50) over bare HTTP p50 / 2 + redsync p50 / 2\t%.2f (%s / %s)\t\tinfo\n",
				float64(path)/float64(max(summed, 1)), ms(path), ms(summed))
		}
	}
	release := spans(x.turns, func(t turn) time.Duration { return t.released.Sub(t.releasing) })
	fmt.Fprintf(w, "contended: release p50, p99 (DELETE sent to its 204, the lock handed over meanwhile)\t%s, %s\t\tinfo\n", ms(release.pct(0.5)), ms(release.pct(0.99)))
	if p := run["contended: "+pgContendedMode]; p != nil && p.cycles > 0 {
		// A waiter waits for the hand-overs ahead of it: its wait counted in
		// hand-overs (the wait times the cycles/s) is the queue's fairness
		// apart from the hand-over's speed, which the target above holds.
		xIn, pIn := waitP99(x).Seconds()*x.perSecond(), waitP99(p).Seconds()*p.perSecond()
		line("contended: wait p99 in hand-overs (wait p99 × cycles/s) over Postgres advisory locks'",
			fmt.Sprintf("%.2f (%.1f / %.1f)", xIn/max(pIn, 1e-9), xIn, pIn), "<= 1.5", xIn <= 1.5*pIn)
		fmt.Fprintf(w, "contended: Postgres cycles/s over the ideal 1 / hold; over 1 / (its hold slept p50 %s)\t%.2f; %.2f\t\tinfo\n",
			ms(slept(p.turns).pct(0.5)), p.perSecond()*float64(p.hold)/float64(time.Second),
			p.perSecond()*float64(slept(p.turns).pct(0.5))/float64(time.Second))
	}
}

// slept are the holds as the clients slept them: from the acquire's answer
// to the release sent.
func slept(turns []turn) sample {
	return spans(turns, func(t turn) time.Duration { return t.releasing.Sub(t.acquired) })
}
