// Package checker judges recorded lock windows: it finds every broken
// promise of mutual exclusion and fencing in a history of holds, for locks,
// read-write locks, locks on several resources and semaphores. It is pure: a
// workload (the soak in tests/) records the windows, Check returns the
// violations, Report formats them. docs/safety.md ("How it is tested") states
// the promises; this comment states how each is checked.
//
// # Windows
//
// A Window is one holder's safe window on one resource, in time since the
// run's start, measured on the holder's own monotonic clock: Sent when it
// sent the acquire, Start when it read the answer, End the earlier of (acquire
// sent + validity) and (release sent), moved by each successful extend sent
// before it to (extend sent + the extend's validity). A window with End ≤
// Start (the answer came after the validity was over) gives its holder
// nothing: it is skipped by every rule except a semaphore's unique fences.
// A lock on several resources gives one Window per resource.
//
// # Rules
//
//   - Overlap, per resource and limit: at the start of every non-empty
//     window, the other holders whose windows are still open number fewer
//     than limit (1 for a lock, N for a semaphore of limit N). Touching ends
//     (one ends when the other starts) do not overlap. A violation is
//     reported once per window that starts over the limit.
//   - Readers: the windows of readers of a read-write lock (Read) conflict
//     only with writers'; two readers at once are no overlap.
//   - Client-chosen tokens: the windows of one Token are one holder's. They
//     count once, and a re-acquire with the same token may keep the same
//     fence (an idempotent retry of a hold that never lapsed); any other
//     window must still have a greater fence.
//   - Fence order, of a lock: a writer's fence is greater than that of every
//     window that started before it; a reader's is at least that of every
//     writer whose window started before the reader's acquire was sent.
//   - Fence order, of a semaphore (limit > 1): a window's fence is greater
//     than that of every window that started before its acquire was sent
//     (acquisitions in flight together may get their fences in either
//     order); a re-acquire that keeps its fence counts as sent with its
//     hold's first acquire.
//   - Unique fences, of a semaphore: no two holds (a window, or the windows
//     of one token and fence) get the same fence, empty windows included.
//   - Per permit, of a semaphore: the windows that know their permit
//     (Permit > 0) are checked, permit by permit, as a lock.
package checker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Window is one holder's safe window on a resource, in time since the run's
// start (see the package comment).
type Window struct {
	ID         string // client and acquisition, e.g. "c3#17"
	Resource   string
	Token      string // set for a client-chosen token: windows of one token and fence are one hold
	Fence      int64
	Permit     int           // a semaphore's permit + 1 (0: a lock, or not known)
	Read       bool          // a reader's window of a read-write lock
	Sent       time.Duration // when the acquire was sent
	Start, End time.Duration // when the answer was read; when the holder stops relying on it
	Note       string        // how the window came about, for a report
}

func (w Window) String() string {
	s := fmt.Sprintf("%s [%v, %v] fence %d", w.ID, w.Start.Round(time.Millisecond), w.End.Round(time.Millisecond), w.Fence)
	if w.Read {
		s += " read"
	}
	if w.Note != "" {
		s += " (" + w.Note + ")"
	}
	return s
}

// Kind is the rule a Violation breaks.
type Kind string

// The kinds of violation.
const (
	Overlap   Kind = "overlap"   // more holders at once than the limit
	Fence     Kind = "fence"     // a fence not above those it must follow
	Duplicate Kind = "duplicate" // a semaphore's fence handed out to two holds
)

// Violation is one broken promise found by Check.
type Violation struct {
	Kind Kind
	A, B Window // of one resource; A starts no later than B
	// Others are, for an overlap, the other holders open when B starts
	// (the window reaching furthest of each), latest end first; Others[0]
	// is A.
	Others []Window
}

func (v Violation) String() string {
	switch {
	case v.Kind == Overlap && len(v.Others) > 1:
		ws := make([]string, len(v.Others))
		for i, o := range v.Others {
			ws[i] = o.String()
		}
		return fmt.Sprintf("overlap on %s: %d holders at once when %v starts: %s", v.A.Resource, len(v.Others)+1, v.B, strings.Join(ws, ", "))
	case v.Kind == Overlap:
		return fmt.Sprintf("overlap on %s: %v and %v hold it together for %v",
			v.A.Resource, v.A, v.B, (min(v.A.End, v.B.End) - v.B.Start).Round(time.Millisecond))
	case v.Kind == Duplicate:
		return fmt.Sprintf("fence handed out twice on %s: %v and %v", v.A.Resource, v.A, v.B)
	default:
		return fmt.Sprintf("fence not increasing on %s: %v, then %v", v.A.Resource, v.A, v.B)
	}
}

// Check returns every violation in ws of the rules in the package comment,
// for locks (limit 0 or 1) or semaphores of limit permits, and per resource
// the most holders seen at once (peak). Violations come per resource in
// name order, and within one in order of B's start; a semaphore's duplicates
// and per-permit violations follow.
func Check(ws []Window, limit int) (vs []Violation, peak map[string]int) {
	limit = max(limit, 1)
	byRes := map[string][]Window{}
	for _, w := range ws {
		if w.End > w.Start {
			byRes[w.Resource] = append(byRes[w.Resource], w)
		}
	}
	peak = map[string]int{}
	holdSent := firstSent(ws)
	for _, res := range slices.Sorted(maps.Keys(byRes)) {
		vs = append(vs, checkResource(byRes[res], limit, holdSent, peak)...)
	}
	if limit > 1 {
		vs = append(vs, duplicates(ws)...)
		var permits []Window
		for _, w := range ws {
			if w.Permit > 0 {
				w.Resource += fmt.Sprintf("#%d", w.Permit-1)
				permits = append(permits, w)
			}
		}
		pvs, _ := Check(permits, 1)
		vs = append(vs, pvs...)
	}
	return vs, peak
}

// hold names a hold: a client-chosen token and its fence.
func hold(w Window) string { return fmt.Sprint(w.Token, "/", w.Fence) }

// firstSent returns, per hold of a client-chosen token, when its first
// acquire was sent.
func firstSent(ws []Window) map[string]time.Duration {
	sent := map[string]time.Duration{}
	for _, w := range ws {
		if s, ok := sent[hold(w)]; w.Token != "" && (!ok || w.Sent < s) {
			sent[hold(w)] = w.Sent
		}
	}
	return sent
}

// checkResource returns the overlaps and fence violations among the
// non-empty windows of one resource, and records its peak.
func checkResource(list []Window, limit int, holdSent map[string]time.Duration, peak map[string]int) []Violation {
	var out []Violation
	holder := func(w Window) string { return cmp.Or(w.Token, "#"+w.ID) }
	slices.SortStableFunc(list, func(a, b Window) int { return cmp.Compare(a.Start, b.Start) })
	var active []Window                 // started, not over
	var maxFence int64                  // of the windows started so far
	writers := make([]int64, len(list)) // the greatest writer's fence of list[:i+1]
	for i, w := range list {
		active = slices.DeleteFunc(active, func(a Window) bool { return a.End <= w.Start })
		// Other holders, by the window reaching furthest: all of them,
		// and those w conflicts with (not two readers).
		others, conflicts := map[string]Window{}, map[string]Window{}
		for _, a := range active {
			k := holder(a)
			if k == holder(w) {
				continue
			}
			if a.End > others[k].End {
				others[k] = a
			}
			if !(a.Read && w.Read) && a.End > conflicts[k].End {
				conflicts[k] = a
			}
		}
		peak[w.Resource] = max(peak[w.Resource], len(others)+1)
		if len(conflicts) >= limit {
			held := slices.SortedFunc(maps.Values(conflicts), func(a, b Window) int { return cmp.Compare(b.End, a.End) })
			out = append(out, Violation{Kind: Overlap, A: held[0], B: w, Others: held})
		}
		sent, ok := holdSent[hold(w)]
		if !ok {
			sent = w.Sent
		}
		if i > 0 {
			writers[i] = writers[i-1]
		}
		switch {
		case i == 0:
		case w.Read:
			// The writers whose window started before w's acquire was sent.
			if n, _ := slices.BinarySearchFunc(list[:i], sent, func(a Window, s time.Duration) int { return cmp.Compare(a.Start, s) }); n > 0 && writers[n-1] > w.Fence {
				out = append(out, Violation{Kind: Fence, A: fenced(list[:n], writers[n-1]), B: w})
			}
		case maxFence >= w.Fence:
			// Rare (a fence out of order, or a re-acquire): find the
			// window. Of a semaphore, only those started before w's
			// acquire was sent count.
			var bad *Window
			for j := range list[:i] {
				a := &list[j]
				if (limit == 1 || a.Start < sent) && a.Fence >= w.Fence && !(a.Fence == w.Fence && sameToken(*a, w)) && (bad == nil || a.Fence > bad.Fence) {
					bad = a
				}
			}
			if bad != nil {
				out = append(out, Violation{Kind: Fence, A: *bad, B: w})
			}
		}
		if !w.Read {
			writers[i] = max(writers[i], w.Fence)
		}
		maxFence = max(maxFence, w.Fence)
		active = append(active, w)
	}
	return out
}

// duplicates returns a violation for each fence of a semaphore that two
// holds got (a hold: one window, or the windows of one client-chosen token
// with one fence), empty windows included: a fence is handed out once.
func duplicates(ws []Window) []Violation {
	var out []Violation
	first := map[string]Window{} // by resource and fence
	for _, w := range ws {
		k := fmt.Sprint(w.Resource, "/", w.Fence)
		a, seen := first[k]
		switch {
		case !seen:
			first[k] = w
		case !sameToken(a, w) && a.Start <= w.Start:
			out = append(out, Violation{Kind: Duplicate, A: a, B: w})
		case !sameToken(a, w):
			out = append(out, Violation{Kind: Duplicate, A: w, B: a})
		}
	}
	return out
}

// fenced returns the writer's window of ws with fence.
func fenced(ws []Window, fence int64) Window {
	i := slices.IndexFunc(ws, func(a Window) bool { return !a.Read && a.Fence == fence })
	return ws[i]
}

// sameToken reports whether a and b were held with the same client-chosen
// token.
func sameToken(a, b Window) bool { return a.Token != "" && a.Token == b.Token }

// Report formats vs, one a line, at most limit of them.
func Report(vs []Violation, limit int) string {
	var b strings.Builder
	for i, v := range vs {
		if i == limit {
			fmt.Fprintf(&b, "… and %d more\n", len(vs)-limit)
			break
		}
		b.WriteString(v.String() + "\n")
	}
	return b.String()
}
