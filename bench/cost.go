package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/redlockd/redlockd/internal/redistest"
)

// cost is what the servers spent, so far or over a run: the commands each
// Redis node ran, and the CPU time of each process.
//
// INFO commandstats counts each command a script runs (redis.call) apart
// from the EVALSHA that ran the script (Redis 7: the script's commands are
// counted under their own names), so commands are the commands the nodes
// ran, from a client or inside a script, and scripts the script calls
// (EVAL, EVALSHA and their _RO forms, FCALL) that ran them. INFO itself, the
// tool's and the health checks', is left out. The time Redis counts inside
// the script calls (their usec) runs from each call's start to its end: the
// scripts' own work, their commands included, and any wait for a core
// meanwhile.
type cost struct {
	commands, scripts []int64            // on each node
	byName            []map[string]int64 // on each node: the commands and script calls by name
	inScripts         []time.Duration    // on each node: the time inside script calls
	redis             []time.Duration    // CPU time (utime + stime) of each node's process
	// Instructions retired by each node's main thread, in user space and
	// in the kernel (see redistest.Instructions); nil without counters.
	instructions []uint64
	// Of the HTTP server's process (the gateway's, or a bare server's); of
	// postgres and its backends.
	server, postgres time.Duration
}

// scriptCalls are the commands of INFO commandstats that run a script.
var scriptCalls = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// spent reads what the nodes (with their instruction counters, if any), the
// HTTP server (pid server; 0: none) and postgres (its postmaster's pid; 0:
// none) spent so far.
func spent(ctx context.Context, nodes []*redistest.Server, counters []*redistest.Instructions, server, postgres int) (c cost, err error) {
	c.commands, c.scripts, c.redis = make([]int64, len(nodes)), make([]int64, len(nodes)), make([]time.Duration, len(nodes))
	c.inScripts = make([]time.Duration, len(nodes))
	for i, s := range nodes {
		stats, err := s.CommandStats(ctx)
		if err != nil {
			return c, fmt.Errorf("INFO commandstats of %s: %w", s.Addr(), err)
		}
		c.byName = append(c.byName, map[string]int64{})
		for name, st := range stats {
			if name != "info" {
				c.byName[i][name] = st.Calls
			}
			switch {
			case slices.Contains(scriptCalls, name):
				c.scripts[i] += st.Calls
				c.inScripts[i] += time.Duration(st.Usec) * time.Microsecond
			case name != "info":
				c.commands[i] += st.Calls
			}
		}
		if c.redis[i], err = redistest.CPUTime(s.PID()); err != nil {
			return c, err
		}
	}
	for _, ic := range counters {
		user, kernel, err := ic.Read()
		if err != nil {
			return c, err
		}
		c.instructions = append(c.instructions, user+kernel)
	}
	if server > 0 {
		if c.server, err = redistest.CPUTime(server); err != nil {
			return c, err
		}
	}
	if postgres > 0 {
		c.postgres, err = treeCPUTime(postgres)
	}
	return c, err
}

// since is what was spent from before to c.
func (c cost) since(before cost) cost {
	d := cost{server: c.server - before.server, postgres: c.postgres - before.postgres}
	for i := range c.commands {
		d.commands = append(d.commands, c.commands[i]-before.commands[i])
		d.scripts = append(d.scripts, c.scripts[i]-before.scripts[i])
		d.redis = append(d.redis, c.redis[i]-before.redis[i])
		d.inScripts = append(d.inScripts, c.inScripts[i]-before.inScripts[i])
		d.byName = append(d.byName, addCounts(c.byName[i], before.byName[i], -1))
	}
	for i := range c.instructions {
		d.instructions = append(d.instructions, c.instructions[i]-before.instructions[i])
	}
	return d
}

// addCounts is a + sign × b, without the names whose sum is 0.
func addCounts(a, b map[string]int64, sign int64) map[string]int64 {
	s := maps.Clone(a)
	for name, n := range b {
		if s[name] += sign * n; s[name] == 0 {
			delete(s, name)
		}
	}
	return s
}

// plus is c and x, two costs of the same nodes, added up.
func (c cost) plus(x cost) cost {
	if c.commands == nil {
		return x
	}
	s := cost{server: c.server + x.server, postgres: c.postgres + x.postgres}
	for i := range c.commands {
		s.commands = append(s.commands, c.commands[i]+x.commands[i])
		s.scripts = append(s.scripts, c.scripts[i]+x.scripts[i])
		s.redis = append(s.redis, c.redis[i]+x.redis[i])
		s.inScripts = append(s.inScripts, c.inScripts[i]+x.inScripts[i])
		s.byName = append(s.byName, addCounts(c.byName[i], x.byName[i], 1))
	}
	for i := range c.instructions {
		s.instructions = append(s.instructions, c.instructions[i]+x.instructions[i])
	}
	return s
}

// treeCPUTime is the CPU time of pid and of its children that still run
// (postgres's backends, a process per connection; those that have exited
// are not counted).
func treeCPUTime(pid int) (time.Duration, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || (p.PID != pid && st.PPID != pid) {
			continue // gone since the listing, or another process
		}
		sum += time.Duration(st.CPUTime() * float64(time.Second))
	}
	return sum, nil
}

// perCycle is the cost of one of cycles, for the first nodes nodes (the
// ones a mode uses): the commands and script calls per node, the mean of
// those nodes, the CPU µs of the nodes together (and the µs inside their
// script calls), of the HTTP server and of postgres, and the thousands of
// instructions of the nodes' main threads together (0 without counters).
type perCycle struct {
	commands, scripts                float64
	redisCPU, serverCPU, postgresCPU float64 // µs
	inScripts                        float64 // µs of the nodes' time inside script calls
	redisKinstr                      float64
}

// byNamePerCycle lists the commands and script calls per node of one of
// cycles on the first nodes nodes, by name, the most frequent first
// ("evalsha 2.0, get 1.0"), down to 0.05.
func (c cost) byNamePerCycle(cycles, nodes int) string {
	sum := map[string]int64{}
	for _, counts := range c.byName[:min(nodes, len(c.byName))] {
		sum = addCounts(sum, counts, 1)
	}
	names := slices.Collect(maps.Keys(sum))
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(sum[b], sum[a]), cmp.Compare(a, b)) })
	var out []string
	for _, name := range names {
		// Not the health checks' and connections' (PING, HELLO...): they
		// round to 0.
		if n := float64(sum[name]) / float64(max(nodes, 1)) / float64(max(cycles, 1)); n >= 0.05 {
			out = append(out, fmt.Sprintf("%s %.1f", name, n))
		}
	}
	return strings.Join(out, ", ")
}

func (c cost) perCycle(cycles, nodes int) (p perCycle) {
	n := float64(max(cycles, 1))
	for i := range min(nodes, len(c.commands)) {
		p.commands += float64(c.commands[i]) / float64(nodes) / n
		p.scripts += float64(c.scripts[i]) / float64(nodes) / n
		p.redisCPU += float64(c.redis[i].Microseconds()) / n
		p.inScripts += float64(c.inScripts[i].Microseconds()) / n
	}
	for i := range min(nodes, len(c.instructions)) {
		p.redisKinstr += float64(c.instructions[i]) / 1e3 / n
	}
	p.serverCPU, p.postgresCPU = float64(c.server.Microseconds())/n, float64(c.postgres.Microseconds())/n
	return p
}

// us is a figure in µs, or "-" when the mode does not use that server.
func us(v float64, used bool) string {
	if !used {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

// printCosts writes the table of what the servers spent per cycle of each
// run that measured it.
func printCosts(w io.Writer, runs []result) {
	fmt.Fprintln(w, "\nWhat the servers spent per cycle (INFO commandstats; utime+stime of /proc/<pid>/stat; the CPU's instruction counters)")
	fmt.Fprintln(w, "group\tacquire+release cycles\tC\tRedis commands per node\tscript calls per node\tRedis CPU µs (the nodes used)\tof which in script calls\tRedis kinstr (their main threads)\tHTTP server CPU µs (the gateway, or a bare server)\tPostgres CPU µs")
	for _, r := range runs {
		if r.cost.commands == nil || r.cycles == 0 {
			continue
		}
		p, b := r.cost.perCycle(r.cycles, r.nodes), r.backend()
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.group, r.name, r.c, us(p.commands, r.nodes > 0), us(p.scripts, r.nodes > 0),
			us(p.redisCPU, r.nodes > 0), us(p.inScripts, r.nodes > 0 && p.scripts > 0), us(p.redisKinstr, r.nodes > 0 && r.cost.instructions != nil), us(p.serverCPU, r.viaHTTPServer()), us(p.postgresCPU, b == viaPostgres))
	}
}

// redisKinstrOver is the figure of the nodes' instructions per cycle of run
// a over those of run b; ok false without counters.
func redisKinstrOver(a, b *result) (figure string, ok bool) {
	if a.cost.instructions == nil || b.cost.instructions == nil {
		return "", false
	}
	_, figure = nodesOver(a, b, func(p perCycle) float64 { return p.redisKinstr }, "thousand")
	return figure, true
}

// redisCPUOver is the nodes' CPU per cycle of run a over that of run b, and
// the figure that shows it with both.
func redisCPUOver(a, b *result) (float64, string) {
	return nodesOver(a, b, func(p perCycle) float64 { return p.redisCPU }, "µs")
}

// inScriptsOver is the nodes' time inside script calls per cycle of run a
// over that of run b, as redisCPUOver.
func inScriptsOver(a, b *result) (float64, string) {
	return nodesOver(a, b, func(p perCycle) float64 { return p.inScripts }, "µs")
}

// nodesOver is a figure per cycle of the nodes (of) of run a over that of
// run b, and the figure that shows it with both, in unit.
func nodesOver(a, b *result, of func(perCycle) float64, unit string) (float64, string) {
	av, bv := of(a.cost.perCycle(a.cycles, a.nodes)), of(b.cost.perCycle(b.cycles, b.nodes))
	f := av / max(bv, 1e-9)
	return f, fmt.Sprintf("%.2f (%.1f / %.1f %s, %d nodes)", f, av, bv, unit, a.nodes)
}

// printCostFloors writes the figures of what a cycle costs the servers, of
// the physical floor at C=1 and of the comparison with Postgres (run: the
// runs by group and name; pgSkipped: why no Postgres ran, if none did;
// noCounters: why no instructions were counted, if none were), and checks
// the floors among them with check.
func printCostFloors(w io.Writer, run map[string]*result, pgSkipped, noCounters error, check func(name, figure, limit string, ok bool)) {
	info := func(name, figure string) { fmt.Fprintf(w, "%s\t%s\t\tinfo\n", name, figure) }
	if noCounters != nil {
		info("Redis instructions", "not counted: "+noCounters.Error())
	}
	per := func(r *result) perCycle { return r.cost.perCycle(r.cycles, r.nodes) }
	ratio := func(a, b float64) float64 { return a / max(b, 1e-9) }
	for _, group := range []string{"latency", "throughput"} {
		g, s := run[group+": "+gatewayMode], run[group+": "+redsyncMode]
		if g == nil || s == nil || g.cost.commands == nil || s.cost.commands == nil {
			continue
		}
		gp, sp := per(g), per(s)
		if group == "latency" {
			check("C=1: Redis commands per node per uncontended cycle (script calls: info)", fmt.Sprintf("%.1f (%.1f)", gp.commands, gp.scripts),
				"<= 5", gp.commands <= 5.05) // 5.05: the health checks' few a second
		}
		info(fmt.Sprintf("C=%d: Redis commands per node per cycle, gateway / redsync (script calls)", g.c),
			fmt.Sprintf("%.2f (%.1f / %.1f; %.1f / %.1f)", ratio(gp.commands, sp.commands), gp.commands, sp.commands, gp.scripts, sp.scripts))
		limit := map[string]float64{"latency": 1.0, "throughput": 0.5}[group]
		f, figure := redisCPUOver(g, s)
		check(fmt.Sprintf("C=%d: Redis CPU per cycle, gateway / redsync", g.c), figure, fmt.Sprintf("<= %.1f", limit), f <= limit)
		if figure, ok := redisKinstrOver(g, s); ok {
			info(fmt.Sprintf("C=%d: Redis instructions per cycle (main threads), gateway / redsync", g.c), figure)
		}
		if p := run[group+": "+pacedRedsyncMode]; p != nil && p.cost.commands != nil {
			// The same calls at the same rate (see pacedRedsyncMode): what
			// the gap above owes to the nodes' idling between calls.
			_, figure := redisCPUOver(g, p)
			info(fmt.Sprintf("C=%d: Redis CPU per cycle, gateway / redsync at the gateway's rate (a cycle per %s)", g.c, ms(p.pace)), figure)
		}
		info(fmt.Sprintf("C=%d: gateway CPU per cycle", g.c), fmt.Sprintf("%.1f µs", gp.serverCPU))
		if group == "latency" {
			info("C=1: the gateway's Redis commands per node per cycle by name", g.cost.byNamePerCycle(g.cycles, g.nodes))
			info("C=1: redsync's Redis commands per node per cycle by name", s.cost.byNamePerCycle(s.cycles, s.nodes))
		}
	}
	if g, b := run["throughput: "+gatewayMode], run["throughput: "+baselineMode]; g != nil && b != nil {
		gp, bp := per(g), per(b)
		check(fmt.Sprintf("C=%d: gateway CPU per cycle / the baseline's", g.c),
			fmt.Sprintf("%.2f (%.1f / %.1f µs; cycles/s %.0f / %.0f)", ratio(gp.serverCPU, bp.serverCPU), gp.serverCPU, bp.serverCPU, g.perSecond(), b.perSecond()),
			"<= 0.5", ratio(gp.serverCPU, bp.serverCPU) <= 0.5)
		// What the same stack costs with none of the gateway's logic, at
		// the gateway's rate (see stackFloorMode).
		if x := run["throughput: "+stackFloorMode]; x != nil && x.cycles > 0 {
			xp := per(x)
			info(fmt.Sprintf("C=%d: the stack floor's CPU per cycle / the baseline's", x.c),
				fmt.Sprintf("%.2f (%.1f / %.1f µs)", ratio(xp.serverCPU, bp.serverCPU), xp.serverCPU, bp.serverCPU))
		}
	}
	if s, t := run["latency: "+setNXMode], run["throughput: "+setNXMode]; s != nil && t != nil {
		info(fmt.Sprintf("bare SET NX (1 Redis): C=%d cycles/s, Redis CPU per cycle; C=1 p50", t.c),
			fmt.Sprintf("%.0f, %.1f µs; %s", t.perSecond(), per(t).redisCPU, ms(s.lat.pct(0.5))))
	}
	g, h, s := run["latency: "+gatewayMode], run["latency: "+bareMode], run["latency: "+setNXMode]
	if g != nil && h != nil && s != nil {
		floor := h.lat.pct(0.5) + s.lat.pct(0.5)
		info("C=1: physical floor: two HTTP hops with no work (bare p50) + two go-redis round trips (SET NX p50)",
			fmt.Sprintf("%s (%s + %s)", ms(floor), ms(h.lat.pct(0.5)), ms(s.lat.pct(0.5))))
		f := float64(g.lat.pct(0.5)) / float64(max(floor, 1))
		check("C=1: gateway p50 / the physical floor", fmt.Sprintf("%.2f (%s)", f, ms(g.lat.pct(0.5))), "<= 2.0", f <= 2)
	}
	if pgSkipped != nil {
		info("Postgres advisory locks", "skipped: "+strings.ReplaceAll(pgSkipped.Error(), "\n", "; "))
		return
	}
	if p := run["throughput: "+postgresMode]; p != nil {
		info(fmt.Sprintf("Postgres advisory locks: C=%d cycles/s, Postgres CPU per cycle", p.c), fmt.Sprintf("%.0f, %.1f µs", p.perSecond(), per(p).postgresCPU))
	}
	if x, p := run["contended: "+contendedMode], run["contended: "+pgContendedMode]; x != nil && p != nil {
		xWait, pWait := waitP99(x), waitP99(p)
		cycles, wait := ratio(x.perSecond(), p.perSecond()), float64(xWait)/float64(max(pWait, 1))
		check("contended: cycles/s, wait p99 over Postgres advisory locks'",
			fmt.Sprintf("%.2f, %.2f (%.0f / %.0f, %s / %s)", cycles, wait, x.perSecond(), p.perSecond(), ms(xWait), ms(pWait)),
			">= 1.0, <= 1.5", cycles >= 1 && wait <= 1.5)
	}
}
