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
