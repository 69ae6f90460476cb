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
const (
	procsTick     = 250 * time.Millisecond
	procsUp       = 0.8 // busy time of the one P from which to use all
	procsDown     = 1.1 // busy time of all the Ps under which to go back to one...
	procsDownTick = 4   // ...for this many ticks in a row
)

// The gateway's garbage collector also follows its heap. Serving requests
// leaves a small live heap (a few MB), which GOGC=100 collects dozens of
// times a second under load, each time with the same fixed costs. While the
// live heap is small the gateway runs with GOGC=400: a few MB more memory,
// and 2-5 % more cycles/s at 64 clients. With a large live heap (thousands
// of waiters), GOGC is 100 again. Setting GOGC in the environment turns this
// off.
const (
	gcSmallPercent = 400
	gcSmallHeap    = 8 << 20  // live heap under which GOGC is gcSmallPercent...
	gcLargeHeap    = 16 << 20 // ...and over which it is 100 again
)

// tuneRuntime starts adapting GOMAXPROCS and GOGC to the load, each unless
// it is set in the environment (GOMAXPROCS also when it is 1 already). It
// returns a function that stops it and restores both.
func tuneRuntime(lookupEnv func(string) (string, bool)) (stop func()) {
	top := runtime.GOMAXPROCS(0)
	_, procsSet := lookupEnv("GOMAXPROCS")
	_, gcSet := lookupEnv("GOGC")
	governProcs, governGC := !procsSet && top > 1, !gcSet
	if !governProcs && !governGC {
		return func() {}
	}
	if governProcs {
		runtime.GOMAXPROCS(1)
	}
	gcPercent := debug.SetGCPercent(-1)
	debug.SetGCPercent(gcPercent)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(procsTick)
		defer t.Stop()
		cur, calm := 1, 0
		small := false
		lastBusy, lastAt := busyTime(), time.Now()
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			if governProcs {
				b, now := busyTime(), time.Now()
				busy := (b - lastBusy) / now.Sub(lastAt).Seconds()
				lastBusy, lastAt = b, now
				var next int
				if next, calm = nextProcs(cur, top, busy, calm); next != cur {
					runtime.GOMAXPROCS(next)
					cur = next
				}
			}
			if governGC {
				metrics.Read(live)
				switch h := live[0].Value.Uint64(); {
				case !small && h < gcSmallHeap:
					small = true
					debug.SetGCPercent(gcSmallPercent)
				case small && h > gcLargeHeap:
					small = false
					debug.SetGCPercent(gcPercent)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		runtime.GOMAXPROCS(top)
		debug.SetGCPercent(gcPercent)
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

// busyTime is how long the Ps have been busy so far, in seconds: running
// goroutines or the runtime, or looking for work, whether or not the
// operating system ran their threads meanwhile.
func busyTime() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64() - s[1].Value.Float64()
}
