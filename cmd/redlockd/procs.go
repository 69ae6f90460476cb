package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The gateway's GOMAXPROCS follows its load.
//
// Each request hands work between goroutines several times (the connection's
// goroutine, net/http's background read, the node connections' readers).
// With several Ps, each hand-off may wake another thread, and on a box whose
// cores are shared (with Redis, say) that thread waits its turn: at light
// load one P serves a request sooner. Measured on 2 cores shared with 5
// redis-servers: one P gave a lone client's lock+release cycle 0.66 ms
// instead of 0.79 ms, and as many cycles/s or more up to 16 clients, but 8 %
// fewer at 64, where the gateway needs more than one core.
//
// So serve starts on one P, and goes up to the startup GOMAXPROCS when that
// P is busy most of the time, and back down to one when all the Ps together
// have been busy about one P's worth or less for a second (idle Ps looking
// for work count as busy, hence the margin). Setting GOMAXPROCS in the
// environment turns this off.
//
// While it uses all the Ps, the collector also gets headroom: a gateway's
// live heap is a few MB, so the default GOGC of 100 collects every few MB,
// some 30 times a second at 64 clients. With all the Ps in use, GOGC is
// raised so that the heap may grow by gcHeadroom beyond the live heap (by
// 100 % at least, 800 % at most): a large live heap (10,000 waiters) keeps
// GOGC 100. Measured at 64 clients on the same box: 5 % more cycles/s. Back
// on one P, GOGC is 100 again. Setting GOGC in the environment leaves the
// collector alone.
const (
	procsTick     = 250 * time.Millisecond
	procsUp       = 0.8 // busy time of the one P from which to use all
	procsDown     = 1.1 // busy time of all the Ps under which to go back to one...
	procsDownTick = 4   // ...for this many ticks in a row

	gcHeadroom = 32 << 20 // how far the heap may grow beyond the live heap with all the Ps
	gcMax      = 800      // GOGC at most
)

// governProcs starts adapting GOMAXPROCS to the process's CPU use, unless
// GOMAXPROCS is set in the environment or is 1 already, and GOGC with it
// unless GOGC is set. It returns a function that stops it and restores the
// startup values.
func governProcs(lookupEnv func(string) (string, bool)) (stop func()) {
	top := runtime.GOMAXPROCS(0)
	if _, set := lookupEnv("GOMAXPROCS"); set || top == 1 {
		return func() {}
	}
	_, gogcSet := lookupEnv("GOGC")
	g := newGovernor(top, !gogcSet, runtime.GOMAXPROCS, debug.SetGCPercent)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(procsTick)
		defer t.Stop()
		lastBusy, lastAt := busyTime(), time.Now()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			b, now := busyTime(), time.Now()
			g.tick((b-lastBusy)/now.Sub(lastAt).Seconds(), liveHeap)
			lastBusy, lastAt = b, now
		}
	}()
	return func() {
		close(quit)
		<-done
		g.restore()
	}
}

// governor is the state of governProcs: it sets GOMAXPROCS and GOGC
// through setProcs and setGC (runtime.GOMAXPROCS and debug.SetGCPercent).
type governor struct {
	top, cur, calm  int
	tuneGC          bool
	gc              int // GOGC now
	setProcs, setGC func(int) int
}

// defaultGOGC is GOGC when the environment does not set it.
const defaultGOGC = 100

// newGovernor starts on one P; tuneGC says whether GOGC is its to change
// (GOGC is then defaultGOGC).
func newGovernor(top int, tuneGC bool, setProcs, setGC func(int) int) *governor {
	g := &governor{top: top, cur: 1, tuneGC: tuneGC, gc: defaultGOGC, setProcs: setProcs, setGC: setGC}
	g.setProcs(1)
	return g
}

// tick takes a tick in which the Ps were busy for busy seconds per second;
// live reads the live heap.
func (g *governor) tick(busy float64, live func() uint64) {
	var next int
	if next, g.calm = nextProcs(g.cur, g.top, busy, g.calm); next != g.cur {
		g.setProcs(next)
		g.cur = next
	}
	if !g.tuneGC {
		return
	}
	want := defaultGOGC
	if g.cur > 1 {
		want = gcPercent(live())
	}
	if want != g.gc {
		g.setGC(want)
		g.gc = want
	}
}

// restore puts back the startup GOMAXPROCS and GOGC.
func (g *governor) restore() {
	g.setProcs(g.top)
	if g.tuneGC {
		g.setGC(defaultGOGC)
	}
}

// nextProcs returns the GOMAXPROCS to use after a tick in which, with cur Ps
// (top at most), the Ps were busy for busy seconds per second, and how many
// ticks in a row they have been little busy with top Ps.
func nextProcs(cur, top int, busy float64, calm int) (int, int) {
	switch {
	case cur == 1 && busy >= procsUp:
		return top, 0
	case cur == 1:
		return 1, 0
	case busy >= procsDown:
		return cur, 0
	case calm+1 >= procsDownTick:
		return 1, 0
	}
	return cur, calm + 1
}

// gcPercent is the GOGC that lets the heap grow gcHeadroom beyond a live
// heap of live bytes, within [100, gcMax].
func gcPercent(live uint64) int {
	if live == 0 {
		return gcMax
	}
	return int(min(max(uint64(gcHeadroom)*100/live, 100), gcMax))
}

// liveHeap is the live heap after the last collection, in bytes.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// busyTime is how long the Ps have been busy so far, in seconds: running
// goroutines or the runtime, or looking for work, whether or not the
// operating system ran their threads meanwhile.
func busyTime() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64() - s[1].Value.Float64()
}
