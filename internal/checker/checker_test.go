package checker_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/checker"
)

// Synthetic histories: each names the violations the checker must find in
// it, in order; the negative controls (an overlap, a fence out of order, a
// fence handed out twice, a permit held twice) must be caught, and the safe
// histories beside them must pass. Times are in milliseconds.

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// lock is a writer's window on resource res, sent when it started.
func lock(id, res string, fence int64, start, end int) checker.Window {
	return checker.Window{ID: id, Resource: res, Fence: fence, Start: ms(start), End: ms(end)}
}

// tokened is a window on "r" held with the client-chosen token.
func tokened(id, token string, fence int64, start, end int) checker.Window {
	w := lock(id, "r", fence, start, end)
	w.Token = token
	return w
}

// reader is a reader's window on "r", sent when it started.
func reader(id string, fence int64, start, end int) checker.Window {
	w := lock(id, "r", fence, start, end)
	w.Read, w.Sent = true, w.Start
	return w
}

// sem is a window on semaphore "r": the acquire sent at sent, its answer
// read at start.
func sem(id string, fence int64, sent, start, end int) checker.Window {
	w := lock(id, "r", fence, start, end)
	w.Sent = ms(sent)
	return w
}

// semToken is sem held with the client-chosen token.
func semToken(id, token string, fence int64, sent, start, end int) checker.Window {
	w := sem(id, fence, sent, start, end)
	w.Token = token
	return w
}

// permit is semToken that knows its permit.
func permit(id, token string, p int, fence int64, sent, start, end int) checker.Window {
	w := semToken(id, token, fence, sent, start, end)
	w.Permit = p + 1
	return w
}

type history struct {
	ws   []checker.Window
	want []checker.Kind // in order
	peak int            // most holders at once on "r", if checked
}

// check runs the checker on each history with limit and compares the kinds
// of the violations found, and the peak where the history gives one.
func check(t *testing.T, limit int, hs map[string]history) {
	t.Helper()
	for name, h := range hs {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			vs, peak := checker.Check(h.ws, limit)
			var got []checker.Kind
			for _, v := range vs {
				got = append(got, v.Kind)
			}
			if !slices.Equal(got, h.want) {
				t.Fatalf("violations %q, want %q:\n%s", got, h.want, checker.Report(vs, 10))
			}
			for _, v := range vs {
				if v.A.Start > v.B.Start || v.A.Resource != v.B.Resource {
					t.Errorf("malformed violation %v", v)
				}
			}
			if h.peak != 0 && peak["r"] != h.peak {
				t.Errorf("most holders at once %d, want %d", peak["r"], h.peak)
			}
		})
	}
}

var (
	overlap   = []checker.Kind{checker.Overlap}
	fence     = []checker.Kind{checker.Fence}
	duplicate = []checker.Kind{checker.Duplicate}
)

// TestCheckLocks: no two windows of a lock overlap and fences increase in
// order of start; the windows of one client-chosen token are one holder's
// and may keep its fence.
func TestCheckLocks(t *testing.T) {
	check(t, 0, map[string]history{
		"empty":                  {nil, nil, 0},
		"sequential":             {[]checker.Window{lock("a", "r", 1, 0, 100), lock("b", "r", 2, 150, 300), lock("c", "r", 5, 300, 400)}, nil, 1},
		"unsorted input":         {[]checker.Window{lock("c", "r", 5, 300, 400), lock("a", "r", 1, 0, 100), lock("b", "r", 2, 150, 300)}, nil, 1},
		"touching is no overlap": {[]checker.Window{lock("a", "r", 1, 0, 100), lock("b", "r", 2, 100, 200)}, nil, 1},
		"other resources":        {[]checker.Window{lock("a", "r", 1, 0, 100), lock("b", "s", 1, 50, 150)}, nil, 1},
		"overlap":                {[]checker.Window{lock("a", "r", 1, 0, 100), lock("b", "r", 2, 99, 200)}, overlap, 2},
		"contained":              {[]checker.Window{lock("a", "r", 1, 0, 500), lock("b", "r", 2, 100, 200), lock("c", "r", 3, 300, 400)}, []checker.Kind{checker.Overlap, checker.Overlap}, 2},
		// c overlaps a (the window reaching furthest), not b.
		"overlap past a short one": {[]checker.Window{lock("a", "r", 1, 0, 500), lock("b", "r", 2, 10, 20), lock("c", "r", 3, 400, 600)}, []checker.Kind{checker.Overlap, checker.Overlap}, 2},
		"fence equal":              {[]checker.Window{lock("a", "r", 7, 0, 100), lock("b", "r", 7, 200, 300)}, fence, 1},
		"fence down":               {[]checker.Window{lock("a", "r", 7, 0, 100), lock("b", "r", 3, 200, 300)}, fence, 1},
		"overlap and fence":        {[]checker.Window{lock("a", "r", 7, 0, 100), lock("b", "r", 1, 50, 300)}, []checker.Kind{checker.Overlap, checker.Fence}, 2},
		// An empty window (answer after validity) is skipped, fence and all.
		"empty window skipped": {[]checker.Window{lock("a", "r", 1, 0, 100), lock("x", "r", 9, 120, 110), lock("b", "r", 2, 150, 300)}, nil, 1},
		"zero-length skipped":  {[]checker.Window{lock("a", "r", 1, 0, 100), lock("x", "r", 0, 50, 50)}, nil, 1},
		// An idempotent re-acquire: the same token and fence are one hold.
		"re-acquire same fence":      {[]checker.Window{tokened("a", "T", 4, 0, 100), tokened("a2", "T", 4, 90, 200), lock("b", "r", 5, 200, 300)}, nil, 1},
		"re-acquire new fence":       {[]checker.Window{tokened("a", "T", 4, 0, 100), lock("b", "r", 5, 100, 200), tokened("a2", "T", 6, 200, 300)}, nil, 1},
		"re-acquire keeps old fence": {[]checker.Window{tokened("a", "T", 4, 0, 100), lock("b", "r", 5, 100, 200), tokened("a2", "T", 4, 200, 300)}, fence, 1},
		"other token same fence":     {[]checker.Window{tokened("a", "T", 4, 0, 100), tokened("b", "U", 4, 100, 200)}, fence, 1},
		"other token overlaps":       {[]checker.Window{tokened("a", "T", 4, 0, 100), tokened("b", "U", 5, 50, 200)}, overlap, 2},
	})
}

// TestCheckReadWrite: readers of a read-write lock may overlap each other,
// nobody may overlap a writer; a writer's fence is above every window's
// before it, a reader's at least that of every writer started before its
// acquire was sent.
func TestCheckReadWrite(t *testing.T) {
	check(t, 0, map[string]history{
		"readers share":               {[]checker.Window{lock("w", "r", 3, 0, 50), reader("a", 3, 60, 200), reader("b", 3, 70, 150), lock("w2", "r", 4, 200, 300)}, nil, 2},
		"writer overlaps a reader":    {[]checker.Window{reader("a", 3, 0, 100), lock("w", "r", 4, 50, 200)}, overlap, 2},
		"reader overlaps a writer":    {[]checker.Window{lock("w", "r", 4, 0, 100), reader("a", 4, 50, 200)}, overlap, 2},
		"writer inside readers":       {[]checker.Window{reader("a", 3, 0, 300), reader("b", 3, 10, 300), lock("w", "r", 4, 100, 200)}, overlap, 3},
		"reader below the last write": {[]checker.Window{lock("w", "r", 5, 0, 100), reader("a", 4, 150, 200)}, fence, 1},
		"writer not above a reader":   {[]checker.Window{reader("a", 5, 0, 100), lock("w", "r", 5, 150, 200)}, fence, 1},
		// A reader sent before the writer's window started may have the
		// fence before it (it is checked against the writers before it).
		"reader sent before a write":  {[]checker.Window{lock("w0", "r", 2, 0, 40), lock("w", "r", 5, 50, 100), func() checker.Window { x := reader("a", 2, 150, 200); x.Sent = ms(45); return x }()}, nil, 1},
		"reader above the last write": {[]checker.Window{lock("w", "r", 5, 0, 100), reader("a", 6, 150, 200)}, nil, 1},
	})
}

// TestCheckSemaphores: at no instant more than limit holders (one token
// counting once); a fence above every window started before the acquire was
// sent, handed out once; each permit, when known, checked as a lock.
func TestCheckSemaphores(t *testing.T) {
	check(t, 2, map[string]history{
		"2 of 2":                   {[]checker.Window{sem("a", 1, 0, 5, 100), sem("b", 2, 10, 20, 150), sem("c", 3, 120, 130, 200)}, nil, 2},
		"3 of 2":                   {[]checker.Window{sem("a", 1, 0, 5, 100), sem("b", 2, 10, 20, 150), sem("c", 3, 30, 40, 200)}, overlap, 3},
		"touching is no overlap":   {[]checker.Window{sem("a", 1, 0, 5, 100), sem("b", 2, 0, 5, 100), sem("c", 3, 90, 100, 200)}, nil, 2},
		"empty window skipped":     {[]checker.Window{sem("a", 1, 0, 5, 100), sem("b", 2, 0, 5, 100), sem("x", 9, 0, 50, 40)}, nil, 2},
		"one token counts once":    {[]checker.Window{semToken("a", "T", 4, 0, 5, 100), semToken("a2", "T", 4, 80, 90, 200), sem("b", 5, 10, 20, 150)}, nil, 2},
		"two tokens count twice":   {[]checker.Window{semToken("a", "T", 4, 0, 5, 100), semToken("a2", "U", 6, 80, 90, 200), sem("b", 5, 10, 20, 150)}, overlap, 3},
		"fence below an earlier":   {[]checker.Window{sem("a", 7, 0, 5, 100), sem("b", 3, 10, 20, 150)}, fence, 2},
		"fence equal":              {[]checker.Window{sem("a", 7, 0, 5, 100), sem("b", 7, 110, 120, 150)}, []checker.Kind{checker.Fence, checker.Duplicate}, 1},
		"concurrent, fences cross": {[]checker.Window{sem("a", 7, 0, 30, 100), sem("b", 8, 10, 20, 150)}, nil, 2},
		"concurrent, one fence":    {[]checker.Window{sem("a", 7, 0, 30, 100), sem("b", 7, 10, 20, 150)}, duplicate, 2},
		"one fence, one empty":     {[]checker.Window{sem("a", 7, 0, 30, 100), sem("b", 7, 10, 200, 150)}, duplicate, 1},
		"re-acquire same fence":    {[]checker.Window{semToken("a", "T", 4, 0, 5, 100), sem("b", 5, 10, 20, 150), semToken("a2", "T", 4, 90, 95, 200)}, nil, 2},
		// A re-acquire after a try with no answer, which may have taken its
		// fence: its hold counts as sent with that try (Sent), not by itself.
		"re-acquire, tried before": {[]checker.Window{sem("b", 5, 10, 20, 150), semToken("a", "T", 4, 5, 160, 200)}, nil, 1},
		"re-acquire, tried after":  {[]checker.Window{sem("b", 5, 10, 20, 150), semToken("a", "T", 4, 30, 160, 200)}, fence, 1},
		// Permits known: each is a lock. T kept its hold unless b took its permit meanwhile.
		"re-acquire keeps its fence":    {[]checker.Window{permit("a", "T", 0, 4, 0, 5, 100), permit("b", "", 1, 5, 110, 120, 150), permit("a2", "T", 0, 4, 160, 170, 200)}, nil, 1},
		"re-acquire keeps an old fence": {[]checker.Window{permit("a", "T", 0, 4, 0, 5, 100), permit("b", "", 0, 5, 110, 120, 150), permit("a2", "T", 0, 4, 160, 170, 200)}, fence, 1},
		"one permit, two holders":       {[]checker.Window{permit("a", "", 1, 4, 0, 5, 100), permit("b", "", 1, 5, 10, 20, 150)}, overlap, 2},
	})
	check(t, 3, map[string]history{
		"3 of 3": {[]checker.Window{sem("a", 1, 0, 5, 100), sem("b", 2, 10, 20, 150), sem("c", 3, 30, 40, 200)}, nil, 3},
		"4 of 3": {[]checker.Window{sem("a", 1, 0, 5, 100), sem("b", 2, 10, 20, 150), sem("c", 3, 30, 40, 200), sem("d", 4, 50, 60, 70)}, overlap, 4},
		// b was sent before a's answer, c after: only c must be above a.
		"fence below the earlier one only": {[]checker.Window{sem("a", 8, 0, 30, 100), sem("b", 7, 10, 40, 150), sem("c", 6, 35, 50, 60)}, fence, 3},
	})
}

// TestReport: a violation names both holders and how long they overlap;
// with a limit, every holder; Report stops at its limit and says how many
// more there are.
func TestReport(t *testing.T) {
	vs, _ := checker.Check([]checker.Window{lock("c1#1", "r", 1, 0, 100), lock("c2#1", "r", 2, 60, 200)}, 0)
	if got := vs[0].String(); !strings.Contains(got, "c1#1") || !strings.Contains(got, "c2#1") || !strings.Contains(got, "40ms") {
		t.Errorf("report %q", got)
	}
	vs, _ = checker.Check([]checker.Window{sem("c1#1", 1, 0, 5, 100), sem("c2#1", 2, 0, 5, 100), sem("c3#1", 3, 0, 60, 100)}, 2)
	if got := vs[0].String(); !strings.Contains(got, "3 holders") || !strings.Contains(got, "c1#1") || !strings.Contains(got, "c2#1") || !strings.Contains(got, "c3#1") {
		t.Errorf("report %q", got)
	}
	vs, _ = checker.Check([]checker.Window{lock("a", "r", 1, 0, 500), lock("b", "r", 2, 10, 20), lock("c", "r", 3, 30, 40), lock("d", "r", 4, 50, 60)}, 0)
	if got, want := checker.Report(vs, 2), "… and 1 more\n"; strings.Count(got, "\n") != 3 || !strings.HasSuffix(got, want) {
		t.Errorf("Report of %d violations, at most 2:\n%s", len(vs), got)
	}
}

// Two holders of one lock overlapping for 40 ms, the second with a smaller
// fence.
func ExampleCheck() {
	vs, peak := checker.Check([]checker.Window{
		{ID: "c1#1", Resource: "r", Fence: 7, Start: 0, End: 100 * time.Millisecond},
		{ID: "c2#1", Resource: "r", Fence: 3, Start: 60 * time.Millisecond, End: 200 * time.Millisecond},
	}, 1)
	fmt.Print(checker.Report(vs, 10))
	fmt.Println("most holders at once:", peak["r"])
	// Output:
	// overlap on r: c1#1 [0s, 100ms] fence 7 and c2#1 [60ms, 200ms] fence 3 hold it together for 40ms
	// fence not increasing on r: c1#1 [0s, 100ms] fence 7, then c2#1 [60ms, 200ms] fence 3
	// most holders at once: 2
}
