package main

import (
	"runtime"
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

// governProcs starts adapting GOMAXPROCS to the process's CPU use, unless
// GOMAXPROCS is set in the environment or is 1 already. It returns a
// function that stops it and restores the startup value.
func governProcs(lookupEnv func(string) (string, bool)) (stop func()) {
	top := runtime.GOMAXPROCS(0)
	if _, set := lookupEnv("GOMAXPROCS"); set || top == 1 {
		return func() {}
	}
	runtime.GOMAXPROCS(1)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(procsTick)
		defer t.Stop()
		cur, calm := 1, 0
		lastBusy, lastAt := busyTime(), time.Now()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			b, now := busyTime(), time.Now()
			busy := (b - lastBusy) / now.Sub(lastAt).Seconds()
			lastBusy, lastAt = b, now
			var next int
			if next, calm = nextProcs(cur, top, busy, calm); next != cur {
				runtime.GOMAXPROCS(next)
				cur = next
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		runtime.GOMAXPROCS(top)
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
