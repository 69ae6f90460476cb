package main

import (
	"runtime"
	"testing"
)

func TestNextProcs(t *testing.T) {
	type state struct{ cur, calm int }
	for _, tc := range []struct {
		name string
		in   state
		busy float64
		want state
	}{
		{"one P, light load: stays", state{1, 0}, 0.5, state{1, 0}},
		{"one P, busy most of the time: all", state{1, 0}, 0.85, state{4, 0}},
		{"all, busy: stays", state{4, 0}, 1.5, state{4, 0}},
		{"all, busy again: calm count reset", state{4, 2}, 1.5, state{4, 0}},
		{"all, about one P's worth: counts", state{4, 0}, 0.9, state{4, 1}},
		{"all, about one P's worth for long enough: one", state{4, procsDownTick - 1}, 0.9, state{1, 0}},
	} {
		cur, calm := nextProcs(tc.in.cur, 4, tc.busy, tc.in.calm)
		if (state{cur, calm}) != tc.want {
			t.Errorf("%s: nextProcs(%d, 4, %.2f, %d) = %d, %d; want %+v", tc.name, tc.in.cur, tc.busy, tc.in.calm, cur, calm, tc.want)
		}
	}
}

func TestGovernProcs(t *testing.T) {
	top := runtime.GOMAXPROCS(0)
	env := func(set bool) func(string) (string, bool) {
		return func(k string) (string, bool) { return "3", set && k == "GOMAXPROCS" }
	}
	stop := governProcs(env(true))
	if got := runtime.GOMAXPROCS(0); got != top {
		t.Errorf("with GOMAXPROCS set: GOMAXPROCS changed to %d", got)
	}
	stop()
	if top == 1 {
		return // nothing to govern on one CPU
	}
	stop = governProcs(env(false))
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("governed: GOMAXPROCS = %d at start, want 1", got)
	}
	stop()
	if got := runtime.GOMAXPROCS(0); got != top {
		t.Errorf("after stop: GOMAXPROCS = %d, want %d", got, top)
	}
}

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, gcMax},
		{1 << 20, gcMax},               // 1 MB live: 800 %, the cap
		{4 << 20, 800},                 // 4 MB: 32 MB of headroom is 800 %
		{8 << 20, 400},                 // 8 MB: 400 %
		{32 << 20, 100},                // 32 MB: 100 %
		{200 << 20, 100},               // a large live heap keeps the default
		{gcHeadroom * 100 / 250, 250},  // in between
		{gcHeadroom * 100 / 1000, 800}, // above the cap
	} {
		if got := gcPercent(tc.live); got != tc.want {
			t.Errorf("gcPercent(%d) = %d, want %d", tc.live, got, tc.want)
		}
	}
}

// TestGovernor drives the governor through load and back: all the Ps and
// GOGC from the live heap under load, one P and GOGC 100 after, and GOGC
// untouched when it is not the governor's.
func TestGovernor(t *testing.T) {
	for _, tuneGC := range []bool{true, false} {
		procs, gc := 4, 100
		var gcSets int
		setProcs := func(n int) int { old := procs; procs = n; return old }
		setGC := func(n int) int { old := gc; gc = n; gcSets++; return old }
		live := func() uint64 { return 8 << 20 }
		g := newGovernor(4, tuneGC, setProcs, setGC)
		if procs != 1 {
			t.Fatalf("start: GOMAXPROCS %d, want 1", procs)
		}
		g.tick(0.3, live)
		if procs != 1 || gc != 100 {
			t.Errorf("light load: GOMAXPROCS %d GOGC %d, want 1 and 100", procs, gc)
		}
		g.tick(0.9, live)
		wantGC := 100
		if tuneGC {
			wantGC = 400
		}
		if procs != 4 || gc != wantGC {
			t.Errorf("tuneGC %v, busy: GOMAXPROCS %d GOGC %d, want 4 and %d", tuneGC, procs, gc, wantGC)
		}
		g.tick(1.5, func() uint64 { return 64 << 20 })
		if procs != 4 || gc != 100 {
			t.Errorf("tuneGC %v, busy with a large live heap: GOMAXPROCS %d GOGC %d, want 4 and 100", tuneGC, procs, gc)
		}
		g.tick(1.5, live)
		for range procsDownTick {
			g.tick(0.5, live)
		}
		if procs != 1 || gc != 100 {
			t.Errorf("tuneGC %v, calm again: GOMAXPROCS %d GOGC %d, want 1 and 100", tuneGC, procs, gc)
		}
		g.tick(0.9, live)
		g.restore()
		if procs != 4 || gc != 100 {
			t.Errorf("tuneGC %v, restored: GOMAXPROCS %d GOGC %d, want 4 and 100", tuneGC, procs, gc)
		}
		if !tuneGC && gcSets != 0 {
			t.Errorf("GOGC set in the environment: the governor set GOGC %d times", gcSets)
		}
	}
}
