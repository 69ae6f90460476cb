package tests

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/checker"
	"github.com/redlockd/redlockd/internal/redistest"
)

// The soak: mutual exclusion and fencing under faults (docs/safety.md, "How
// it is tested").
//
// Many HTTP clients contend for a few resources through the gateway while a
// seeded fault schedule kills, restarts, pauses and cuts off nodes. Every
// client records, on its own monotonic clock, when it sent each acquire, when
// the answer arrived, the validity and fencing token it got, the extends it
// made and when it sent its release. A holder may rely on the lock from the
// moment it reads the answer until the earlier of (acquire sent + validity)
// and (release sent); a successful extend sent before that end moves it to
// (extend sent + the extend's validity). Those windows go to the checker
// (internal/checker, whose package comment states its rules), which proves
// per resource that no more holders than the limit overlap and that fencing
// tokens are in order. (Clients never extend with a TTL shorter than the
// lock's: an extend sets the keys' TTL, so a shorter one ends the lock
// sooner, also on the nodes it reached when it fails as a whole.)
//
// Windows are measured on the clients' clocks, so a starved gateway or client
// shortens or empties them but never makes a safe run look unsafe: the
// gateway's node timeout may be missed under load (the clients count the
// 503s and go on), and the runs ask only for enough acquisitions to prove
// something.
//
// Some acquires send a client-chosen token, and a client re-acquires with
// the token of its last window on a resource that it did not release (the
// retry of an acquire whose answer was lost, or after its lock ran out):
// that re-acquire keeps the fencing token only while the token still holds
// the lock on a quorum, so the same token with the same fence is one hold.
// A re-acquire that got no answer (a 503, or none) may have taken the lock
// on a quorum all the same, and the next one then keeps that fence: such a
// hold counts as sent when the first of those tries was.
// With read-write locks (contention.RW) clients take a resource as readers
// or writers; with contention.Multi half the acquires take several locks at
// once; with contention.Limit the resources are semaphores.
//
// REDLOCKD_SOAK_SEED replays a schedule (the seed is printed at start),
// REDLOCKD_SOAK_DURATION sets the length (default 20s; e.g. 5m for a soak).

// ---------------------------------------------------------------------------
// fault schedules

// faultEvent is one step of a fault schedule.
type faultEvent struct {
	At    time.Duration
	Kind  string // kill restart pause resume cut blackhole restore latency bandwidth heal
	Nodes []int
	Arg   int    // latency in ms each way, bandwidth in KB/s
	Label string // what the fault is counted as, when not its Kind
}

func (e faultEvent) String() string {
	s := fmt.Sprintf("%v %s n%v", e.At.Round(time.Millisecond), cmp.Or(e.Label, e.Kind), e.Nodes)
	if e.Arg != 0 {
		s += " " + strconv.Itoa(e.Arg)
	}
	return s
}

// faultBegins reports whether the event injects a fault (rather than
// removing one); faults are counted by their beginning.
func (e faultEvent) begins() bool {
	switch e.Kind {
	case "kill", "restart", "pause", "cut", "blackhole", "latency", "bandwidth":
		return true
	}
	return false
}

// safeSchedule draws a fault schedule that stays within the assumptions of
// the safety claims: at any time at most N - quorum (2 of 5) of the nodes
// are faulty, a restarted node counting as faulty until its quarantine is
// over; now and then, with no other fault on, a majority is paused briefly
// (which costs availability, not safety). Gray failures are among the
// faults: 2 nodes paused at once, and latency on 1 or 2 nodes with a round
// trip well above or just below nodeTimeout (the gateway's).
func safeSchedule(rng *rand.Rand, d time.Duration, n int, maxTTL, nodeTimeout time.Duration, proxies bool) []faultEvent {
	var evs []faultEvent
	busy := make([]time.Duration, n) // faulty until
	maxFaulty := n - (n/2 + 1)
	span := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	end := d - 300*time.Millisecond
	clip := func(t time.Duration) time.Duration { return min(t, end) }
	pending := -1 // a 2-node fault drawn while another fault was on: it comes next
	for t := 300 * time.Millisecond; ; {
		t += span(50*time.Millisecond, 550*time.Millisecond)
		if t >= end {
			break
		}
		var free []int
		for i := range n {
			if busy[i] <= t {
				free = append(free, i)
			}
		}
		faulty := n - len(free)
		k := pending
		if k < 0 {
			k = rng.IntN(120)
		}
		if !proxies && k >= 65 && k < 117 {
			k = rng.IntN(65) // no proxy: process faults only
		}
		m := 1 // nodes the fault takes
		if k >= 53 && k < 60 || k >= 105 && k < 109 {
			m = 2
		}
		if faulty+m > maxFaulty {
			if m == 2 {
				pending = k // else the others leave two nodes free too seldom
			}
			continue
		}
		pending = -1
		node := free[rng.IntN(len(free))]
		// take picks m free nodes, faulty until the given time.
		take := func(until time.Duration) []int {
			ns := make([]int, m)
			for i, j := range rng.Perm(len(free))[:m] {
				ns[i] = free[j]
				busy[free[j]] = until
			}
			slices.Sort(ns)
			return ns
		}
		switch {
		case k < 20: // crash and immediate restart, empty
			evs = append(evs, faultEvent{At: t, Kind: "restart", Nodes: []int{node}})
			busy[node] = t + maxTTL + 1500*time.Millisecond
		case k < 30: // down for a while, then back empty
			up := clip(t + span(100*time.Millisecond, 800*time.Millisecond))
			evs = append(evs, faultEvent{At: t, Kind: "kill", Nodes: []int{node}}, faultEvent{At: up, Kind: "restart", Nodes: []int{node}})
			busy[node] = up + maxTTL + 1500*time.Millisecond
		case k < 53: // SIGSTOP / SIGCONT
			back := clip(t + span(100*time.Millisecond, 1500*time.Millisecond))
			evs = append(evs, faultEvent{At: t, Kind: "pause", Nodes: []int{node}}, faultEvent{At: back, Kind: "resume", Nodes: []int{node}})
			busy[node] = back + 100*time.Millisecond
		case k < 60: // a gray minority: 2 nodes paused at once
			back := clip(t + span(300*time.Millisecond, 2*time.Second))
			ns := take(back + 100*time.Millisecond)
			evs = append(evs, faultEvent{At: t, Kind: "pause", Nodes: ns}, faultEvent{At: back, Kind: "resume", Nodes: ns})
		case k < 65 && faulty == 0: // a majority paused briefly
			perm := rng.Perm(n)[:n/2+1]
			slices.Sort(perm)
			back := clip(t + span(100*time.Millisecond, 600*time.Millisecond))
			evs = append(evs, faultEvent{At: t, Kind: "pause", Nodes: perm}, faultEvent{At: back, Kind: "resume", Nodes: perm})
			for _, i := range perm {
				busy[i] = back + 100*time.Millisecond
			}
		case k < 65:
			continue
		case k < 80: // connections reset, new ones too
			back := clip(t + span(100*time.Millisecond, 1500*time.Millisecond))
			evs = append(evs, faultEvent{At: t, Kind: "cut", Nodes: []int{node}}, faultEvent{At: back, Kind: "restore", Nodes: []int{node}})
			busy[node] = back + 100*time.Millisecond
		case k < 88: // partition: nothing comes back
			back := clip(t + span(100*time.Millisecond, time.Second))
			evs = append(evs, faultEvent{At: t, Kind: "blackhole", Nodes: []int{node}}, faultEvent{At: back, Kind: "restore", Nodes: []int{node}})
			busy[node] = back + 100*time.Millisecond
		case k < 98: // latency each way, sometimes beyond the node timeout
			back := clip(t + span(300*time.Millisecond, 2*time.Second))
			evs = append(evs, faultEvent{At: t, Kind: "latency", Nodes: []int{node}, Arg: 5 + rng.IntN(120)},
				faultEvent{At: back, Kind: "heal", Nodes: []int{node}})
			busy[node] = back + 100*time.Millisecond
		case k < 105: // thin pipe
			back := clip(t + span(300*time.Millisecond, 2*time.Second))
			evs = append(evs, faultEvent{At: t, Kind: "bandwidth", Nodes: []int{node}, Arg: 1 + rng.IntN(20)},
				faultEvent{At: back, Kind: "heal", Nodes: []int{node}})
			busy[node] = back + 100*time.Millisecond
		case k < 117: // a gray minority: 2 (k < 109) or 1 node slow, the round trip 1.5-3x or 0.6-0.9x the node timeout
			rtt, label := 1.5+1.5*rng.Float64(), "latency>timeout"
			if rng.IntN(2) == 0 {
				rtt, label = 0.6+0.3*rng.Float64(), "latency<timeout"
			}
			back := clip(t + span(300*time.Millisecond, 2*time.Second))
			ns := take(back + 100*time.Millisecond)
			evs = append(evs, faultEvent{At: t, Kind: "latency", Nodes: ns, Arg: int(rtt * float64(nodeTimeout.Milliseconds()) / 2), Label: label},
				faultEvent{At: back, Kind: "heal", Nodes: ns})
		default: // restart right after a pause: a node stopped holding locks comes back empty
			evs = append(evs, faultEvent{At: t, Kind: "pause", Nodes: []int{node}},
				faultEvent{At: clip(t + span(50*time.Millisecond, 500*time.Millisecond)), Kind: "restart", Nodes: []int{node}})
			busy[node] = t + 500*time.Millisecond + maxTTL + 1500*time.Millisecond
		}
	}
	slices.SortStableFunc(evs, func(a, b faultEvent) int { return cmp.Compare(a.At, b.At) })
	return evs
}

// majorityRestarts restarts a random majority of the nodes at once, every
// 300–600 ms: with quarantine off, a lock held on them is lost while its
// holder still relies on it.
func majorityRestarts(rng *rand.Rand, d time.Duration, n int) []faultEvent {
	var evs []faultEvent
	for t := 400 * time.Millisecond; t < d-300*time.Millisecond; t += 300*time.Millisecond + time.Duration(rng.Int64N(int64(300*time.Millisecond))) {
		perm := rng.Perm(n)[:n/2+1]
		slices.Sort(perm)
		evs = append(evs, faultEvent{At: t, Kind: "restart", Nodes: perm})
	}
	return evs
}

// formatSchedule prints a schedule, a few events a line.
func formatSchedule(evs []faultEvent) string {
	var b strings.Builder
	for i, e := range evs {
		if i%6 == 0 {
			b.WriteString("\n  ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(e.String())
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// the contention run

// contention describes one run.
type contention struct {
	Nodes     int
	Proxies   bool
	Flags     []string // gateway flags
	Clients   int
	Resources int
	Limit     int    // 0: the resources are locks; N > 0: semaphores of limit N
	RW        bool   // locks taken as a reader or a writer at random
	Multi     bool   // half the acquires take 2-3 locks at once (POST /locks), the others one
	TTL       [2]int // ms, range of ttl_ms
	Waits     []int  // ms, wait_ms values drawn from
	Duration  time.Duration
	Seed      uint64
	Schedule  func(rng *rand.Rand, d time.Duration) []faultEvent
	// Little says why a run proves little of what its test is about (""
	// when it does not), besides too few acquisitions (see safeRun).
	Little     func(c *contention) string
	nodes      []*RedisNode
	proxies    []*faultProxy
	gw         *Gateway
	start      time.Time
	httpClient *http.Client

	mu      sync.Mutex
	windows []checker.Window
	stats   map[string]int
	peak    map[string]int // the most holders at once, per resource
	lost    []string       // holders told not-owner before their window ended
	maxLost time.Duration  // the most window left among them
	// fenceChanged lists extends whose answer carried another fencing
	// token than the acquire's (the API says they keep it).
	fenceChanged []string
}

func (c *contention) count(k string, n int) {
	c.mu.Lock()
	c.stats[k] += n
	c.mu.Unlock()
}

// lockAnswer is the part of an acquire or extend answer the clients use.
type lockAnswer struct {
	Token        string `json:"token"`
	FencingToken int64  `json:"fencing_token"`
	ValidityMs   int64  `json:"validity_ms"`
	Permit       *int   `json:"permit"` // of a semaphore
	Resources    []struct {
		Resource     string `json:"resource"`
		FencingToken int64  `json:"fencing_token"`
	} `json:"resources"` // of a lock on several resources
}

// fences are the fencing tokens of an answer, by resource.
func (a lockAnswer) fences(rs []string) []int64 {
	if len(rs) == 1 && a.Resources == nil {
		return []int64{a.FencingToken}
	}
	fs := make([]int64, len(a.Resources))
	for i, r := range a.Resources {
		fs[i] = r.FencingToken
	}
	return fs
}

// call sends one request on the resources rs and decodes a 200/201 answer
// into out.
func (c *contention) call(ctx context.Context, method string, rs []string, body, token string, out *lockAnswer) (int, error) {
	var hdr []string
	if token != "" {
		hdr = []string{"Lock-Token", token}
	}
	path := "/locks/" + rs[0]
	switch {
	case c.Limit > 0:
		path = "/semaphores/" + rs[0]
	case len(rs) > 1 && method == http.MethodPost:
		path = "/locks"
	case len(rs) > 1:
		path = multiPath(rs)
	}
	req, err := newRequest(c.gw.URL+path, method, body, hdr...)
	if err != nil {
		return 0, err
	}
	r, err := sendWith(c.httpClient, req.WithContext(ctx))
	if err != nil {
		return 0, err // no answer known
	}
	// Every answer of a soak, under faults, keeps the contract too: a 201
	// without a lock in it (an empty token, say) is a mismatch.
	checkContract(req, body, r)
	if r.Status/100 == 2 && out != nil && r.Status != http.StatusNoContent {
		if err := json.Unmarshal(r.Body, out); err != nil {
			return r.Status, err
		}
	}
	return r.Status, nil
}

// sleepCtx sleeps d or until ctx ends; it reports whether it slept it all.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// client contends until ctx ends: acquire a random resource, then release
// it, extend it a few times, or let it expire.
func (c *contention) client(ctx context.Context, id int, rng *rand.Rand) {
	since := func(t time.Time) time.Duration { return t.Sub(c.start) }
	// unreleased is the client-chosen token of this client's last window
	// on a resource and the window's end, while it did not release it. A
	// re-acquire sets the keys' TTL, as an extend does, so the client makes
	// it only once that window is over (a shorter TTL would otherwise end the
	// window early).
	type hold struct {
		token string
		end   time.Time
		read  bool
	}
	unreleased := map[string]hold{}
	// tried is, per re-acquired token, when the first of its re-acquires
	// that ended without a known outcome (a 503, or no answer) was sent:
	// that acquire may have taken the lock on a quorum, and a later
	// re-acquire then keeps its fence, so the hold began when it was sent.
	tried := map[string]time.Time{}
	for seq := 1; ctx.Err() == nil; seq++ {
		rs := []string{fmt.Sprintf("soak-%d", rng.IntN(c.Resources))}
		if c.Multi && rng.IntN(2) == 0 {
			rs = nil
			for _, i := range rng.Perm(c.Resources)[:2+rng.IntN(min(2, c.Resources-1))] {
				rs = append(rs, fmt.Sprintf("soak-%d", i))
			}
		}
		res := strings.Join(rs, ",") // the key of its holds, and its name in reports
		ttl := c.TTL[0] + rng.IntN(c.TTL[1]-c.TTL[0]+1)
		wait := c.Waits[rng.IntN(len(c.Waits))]
		body := fmt.Sprintf(`"ttl_ms":%d,"wait_ms":%d`, ttl, wait)
		if c.Limit > 0 {
			body += fmt.Sprintf(`,"limit":%d`, c.Limit)
		}
		if len(rs) > 1 {
			body += `,"resources":["` + strings.Join(rs, `","`) + `"]`
		}
		token, read := "", c.RW && rng.IntN(3) == 0
		switch k := rng.IntN(4); {
		case k == 0 && unreleased[res].token != "" && time.Now().After(unreleased[res].end):
			token, read = unreleased[res].token, unreleased[res].read // re-acquire, in the same mode
		case k <= 1:
			token = fmt.Sprintf("soak_c%d_%d_%016x", id, seq, rng.Uint64())
		}
		if token != "" {
			body += fmt.Sprintf(`,"token":%q`, token)
		}
		if read {
			body += `,"mode":"read"`
		}
		body = "{" + body + "}"
		var a lockAnswer
		sent := time.Now()
		status, err := c.call(ctx, http.MethodPost, rs, body, "", &a)
		got := time.Now()
		reacquire := token != "" && token == unreleased[res].token
		if _, ok := tried[token]; reacquire && !ok && (err != nil || status == http.StatusServiceUnavailable) {
			tried[token] = sent
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return // the run is over; an answer we did not read gives no window
		case err != nil:
			c.count("acquire error", 1)
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		case status != http.StatusCreated:
			c.count("acquire "+strconv.Itoa(status), 1)
			sleepCtx(ctx, time.Duration(5+rng.IntN(30))*time.Millisecond)
			continue
		}
		c.count("acquired", 1)
		fences := a.fences(rs)
		if len(fences) != len(rs) {
			c.count("acquire answer without a fence per resource", 1)
			continue
		}
		if len(rs) > 1 {
			c.count("acquired several", 1)
		}
		if read {
			c.count("acquired read", 1)
		}
		if reacquire {
			c.count("re-acquired", 1)
		}
		end := sent.Add(time.Duration(a.ValidityMs) * time.Millisecond)
		w := checker.Window{ID: fmt.Sprintf("c%d#%d", id, seq), Token: token, Sent: since(sent), Start: since(got), Read: read}
		note := []string{fmt.Sprintf("acquire sent %v ttl %d wait %d validity %d", since(sent).Round(time.Millisecond), ttl, wait, a.ValidityMs)}
		if first, ok := tried[token]; reacquire && ok {
			// The window still starts now; its hold counts as sent then.
			w.Sent = since(first)
			note[0] += fmt.Sprintf(" (first tried %v)", since(first).Round(time.Millisecond))
			delete(tried, token)
			c.count("re-acquired after a try with no answer", 1)
		}
		if a.Permit != nil {
			w.Permit = *a.Permit + 1
			note[0] += fmt.Sprintf(" permit %d", *a.Permit)
		}
		switch {
		case reacquire:
			note[0] = "re-" + note[0] + " token " + token
		case token != "":
			note[0] += " token " + token
		}
		if !got.Before(end) {
			c.count("empty window", 1)
		}
		release := false
		switch k := rng.IntN(10); {
		case k < 4: // hold a while, release
			sleepCtx(ctx, time.Duration(rng.Float64()*0.9*float64(time.Until(end))))
			release = true
		case k < 7: // extend a few times, then release or let it expire
			cur := ttl // the longest TTL the keys were given
			for range 1 + rng.IntN(3) {
				if !sleepCtx(ctx, time.Duration(rng.Float64()*0.7*float64(time.Until(end)))) {
					break
				}
				if time.Until(end) < 10*time.Millisecond {
					break // too late to rely on an extend
				}
				var e lockAnswer
				// Never shorter than before: an extend sets the keys' TTL, so
				// a shorter one would cut the lock short on the nodes that
				// took it, even when the extend as a whole fails.
				eTTL := cur + rng.IntN(c.TTL[1]-cur+1)
				eSent := time.Now()
				status, err := c.call(ctx, http.MethodPatch, rs, fmt.Sprintf(`{"ttl_ms":%d}`, eTTL), a.Token, &e)
				if err != nil {
					c.count("extend error", 1)
					break
				}
				c.count("extend "+strconv.Itoa(status), 1)
				n := fmt.Sprintf("extend sent %v ttl %d → %d", since(eSent).Round(time.Millisecond), eTTL, status)
				if status == http.StatusOK {
					n += fmt.Sprintf(" validity %d", e.ValidityMs)
				}
				note = append(note, n)
				if status != http.StatusOK {
					if status == http.StatusConflict {
						c.lostEarly(w.ID, res, "extend", end.Sub(eSent))
					}
					break
				}
				cur = eTTL
				if got := e.fences(rs); !slices.Equal(got, fences) {
					c.count("extend changed the fence", 1)
					c.mu.Lock()
					c.fenceChanged = append(c.fenceChanged, fmt.Sprintf("%s on %s: acquired with fencing tokens %v, extend sent %v answered %v",
						w.ID, res, fences, since(eSent).Round(time.Millisecond), got))
					c.mu.Unlock()
				}
				if ext := eSent.Add(time.Duration(e.ValidityMs) * time.Millisecond); eSent.Before(end) && ext.After(end) {
					end = ext
				}
			}
			release = rng.IntN(2) == 0
		default: // let it expire
			sleepCtx(ctx, time.Until(end)+time.Duration(rng.IntN(50))*time.Millisecond)
		}
		delete(unreleased, res)
		if token != "" {
			unreleased[res] = hold{token, end, read}
		}
		if release && ctx.Err() == nil {
			dSent := time.Now()
			status, err := c.call(ctx, http.MethodDelete, rs, "", a.Token, nil)
			if err != nil {
				c.count("release error", 1)
			} else {
				c.count("release "+strconv.Itoa(status), 1)
			}
			if status == http.StatusNoContent {
				delete(unreleased, res)
			}
			if status == http.StatusConflict {
				c.lostEarly(w.ID, res, "release", end.Sub(dSent))
			}
			note = append(note, fmt.Sprintf("release sent %v → %d", since(dSent).Round(time.Millisecond), status))
			end = minTime(end, dSent)
		}
		w.End = since(end)
		w.Note = strings.Join(note, "; ")
		if len(rs) > 1 {
			w.Note = "of " + res + ": " + w.Note
		}
		c.mu.Lock()
		for i, r := range rs { // a lock on several resources holds each of them
			w.Resource, w.Fence = r, fences[i]
			c.windows = append(c.windows, w)
		}
		c.mu.Unlock()
	}
}

// lostEarly records a 409 not-owner to an extend or release sent with left
// of the holder's safe window to go. Near 0 it is the request's own transit
// (the keys expired while it travelled); far from 0 the lock vanished early,
// which no overlap shows when nobody else took it meanwhile.
func (c *contention) lostEarly(id, res, call string, left time.Duration) {
	if left <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost = append(c.lost, fmt.Sprintf("%s on %s: %s sent %v before its window ended → 409", id, res, call, left.Round(time.Millisecond)))
	c.maxLost = max(c.maxLost, left)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// apply carries out one fault event.
func (c *contention) apply(t *testing.T, e faultEvent) {
	t.Helper()
	label := cmp.Or(e.Label, e.Kind)
	if e.Kind == "restart" && c.nodes[e.Nodes[0]].PID() == 0 {
		label = "" // a killed node coming back (empty): part of its "kill"
	}
	for _, i := range e.Nodes {
		n := c.nodes[i]
		var p *faultProxy
		if c.proxies != nil {
			p = c.proxies[i]
		}
		switch e.Kind {
		case "kill":
			n.Kill()
		case "restart":
			n.Restart()
		case "pause":
			n.Pause()
		case "resume":
			n.Resume()
		case "cut":
			p.Cut()
		case "blackhole":
			p.Blackhole()
		case "restore":
			p.Restore()
		case "latency":
			p.SetLatency(time.Duration(e.Arg) * time.Millisecond)
		case "bandwidth":
			p.SetBandwidth(e.Arg)
		case "heal":
			p.SetLatency(0)
			p.SetBandwidth(0)
		default:
			t.Fatalf("unknown fault %q", e.Kind)
		}
	}
	if e.begins() && label != "" {
		if e.Kind == "restart" {
			label = "crash+restart" // killed and started again, empty, at once
		}
		switch {
		case len(e.Nodes) > len(c.nodes)/2:
			label += " (majority)"
		case len(e.Nodes) > 1:
			label += fmt.Sprintf(" x%d", len(e.Nodes))
		}
		c.count("fault "+label, 1)
		c.count("faults", 1)
	}
}

// run starts the nodes (behind proxies if asked) and the gateway, runs the
// clients and the schedule (faults on the test goroutine), and returns the
// violations found.
func (c *contention) run(t *testing.T) []checker.Violation {
	t.Helper()
	c.stats = map[string]int{}
	c.nodes = startCluster(t, c.Nodes)
	addrs := make([]string, c.Nodes)
	for i, n := range c.nodes {
		addrs[i] = n.Addr
	}
	if c.Proxies {
		c.proxies = startProxies(t, c.nodes)
		addrs = proxyAddrs(c.proxies)
	}
	c.gw = startGatewayAt(t, addrs, c.Flags...)
	c.gw.waitReady(t)
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * c.Clients}
	defer tr.CloseIdleConnections()
	c.httpClient = &http.Client{Transport: tr, Timeout: 30 * time.Second}

	schedule := c.Schedule(rand.New(rand.NewPCG(c.Seed, 0)), c.Duration)
	kind := "locks"
	if c.RW {
		kind = "read-write locks"
	}
	if c.Limit > 0 {
		kind = fmt.Sprintf("semaphores of limit %d", c.Limit)
	}
	t.Logf("seed %d (replay with REDLOCKD_SOAK_SEED=%d), %v, %d clients on %d %s, %d nodes, gateway %q; schedule of %d events:%s",
		c.Seed, c.Seed, c.Duration, c.Clients, c.Resources, kind, c.Nodes, c.Flags, len(schedule), formatSchedule(schedule))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.start = time.Now()
	var wg sync.WaitGroup
	// Redis expires keys on the wall clock, the gateway and the clients
	// measure on the monotonic clock: a wall-clock step is outside the
	// assumptions, so watch for one.
	var clockStep time.Duration
	wg.Go(func() {
		prev := time.Now()
		for sleepCtx(ctx, 10*time.Millisecond) {
			now := time.Now()
			step := now.Round(0).Sub(prev.Round(0)) - now.Sub(prev)
			if step < 0 {
				step = -step
			}
			c.mu.Lock()
			clockStep = max(clockStep, step)
			c.mu.Unlock()
			prev = now
		}
	})
	for id := range c.Clients {
		rng := rand.New(rand.NewPCG(c.Seed, uint64(id)+1))
		wg.Go(func() { c.client(ctx, id, rng) })
	}
	for _, e := range schedule {
		sleepCtx(t.Context(), time.Until(c.start.Add(e.At)))
		c.apply(t, e)
	}
	sleepCtx(t.Context(), time.Until(c.start.Add(c.Duration)))
	cancel()
	wg.Wait()

	vs, peak := checker.Check(c.windows, c.Limit)
	c.peak = peak
	keys := slices.Sorted(maps.Keys(c.stats))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, c.stats[k])
	}
	t.Logf("seed %d: %d windows checked; violations %d; most holders at once %v;%s; largest wall-clock step %v",
		c.Seed, len(c.windows), len(vs), peak, b.String(), clockStep)
	if len(c.fenceChanged) > 0 {
		t.Logf("%d extends answered another fencing token than their acquire (windows are checked with the acquire's): %s",
			len(c.fenceChanged), strings.Join(c.fenceChanged, "; "))
	}
	if len(c.lost) > 0 {
		t.Logf("holders told not-owner before their window ended: %d, at most %v before; e.g. %s",
			len(c.lost), c.maxLost, c.lost[0])
	}
	return vs
}

// soakSeed is REDLOCKD_SOAK_SEED, or a fresh seed.
func soakSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("REDLOCKD_SOAK_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("REDLOCKD_SOAK_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// soakDuration is REDLOCKD_SOAK_DURATION, or def.
func soakDuration(t *testing.T, def time.Duration) time.Duration {
	t.Helper()
	if s := os.Getenv("REDLOCKD_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 2*time.Second {
			t.Fatalf("REDLOCKD_SOAK_DURATION=%q: want a Go duration ≥ 2s", s)
		}
		return d
	}
	return def
}

// safeRun is the checker run of the soak: 5 nodes behind fault proxies,
// restart quarantine on, clients on resources (semaphores of limit when
// limit > 0), and a seeded schedule of kills, immediate restarts, pauses (of
// 1 or 2 nodes, sometimes briefly of a majority), cuts, partitions, latency
// (on 1 or 2 nodes, also just below and well above the node timeout) and thin
// pipes on a minority of nodes at a time. It fails the test on a violation
// or an extend answering another fence than its acquire. set, if any, change
// the run (e.g. rw).
//
// A run that grants too few acquisitions proves little: on a machine so busy
// that the nodes miss the 100ms node timeout most of the time (a seed whose
// schedule keeps 2 of the 5 nodes faulty, with the rest of the suite and
// scripts/load.sh sharing 2 cores, granted none in 10s once), it is run again
// with the next seed, and the test fails when 3 runs in a row prove little.
// So is a run that its contention's Little finds short of what the test is
// about (readers that never shared a lock, say: a random run of 84
// acquisitions once had none overlap). Every run's windows are checked: a
// violation in any of them fails it.
func safeRun(t *testing.T, seed uint64, clients, resources, limit int, d time.Duration, set ...func(*contention)) *contention {
	for attempt := uint64(0); ; attempt++ {
		c := safeAttempt(t, seed+attempt, clients, resources, limit, d, set...)
		// Not a speed check (that is the bench's): a workload or gateway
		// that grants almost nothing proves little. Two a second leaves
		// room: the multi soak granted five a second with every core busy.
		little := ""
		if c.stats["acquired"] < 2*int(c.Duration/time.Second) {
			little = fmt.Sprintf("only %d acquisitions in %v", c.stats["acquired"], c.Duration)
		} else if c.Little != nil {
			little = c.Little(c)
		}
		switch {
		case little == "" || t.Failed():
			return c
		case attempt < 2:
			t.Logf("seed %d: %s, the run proves little: again with the next seed", c.Seed, little)
		default:
			t.Errorf("%s, in the 3rd run in a row that proves little", little)
			return c
		}
	}
}

// safeAttempt is one run of safeRun, with seed.
func safeAttempt(t *testing.T, seed uint64, clients, resources, limit int, d time.Duration, set ...func(*contention)) *contention {
	const maxTTL = time.Second
	c := &contention{
		Nodes: 5, Proxies: true,
		Flags: []string{"--restart-quarantine", "on", "--max-ttl", maxTTL.String(), "--default-ttl", maxTTL.String(),
			"--node-timeout", proxyTimeout.String()},
		Clients: clients, Resources: resources, Limit: limit,
		TTL: [2]int{200, 800}, Waits: []int{0, 0, 50, 200},
		Duration: d,
		Seed:     seed,
	}
	c.Schedule = func(rng *rand.Rand, d time.Duration) []faultEvent {
		return safeSchedule(rng, d, c.Nodes, maxTTL, proxyTimeout, c.Proxies)
	}
	for _, f := range set {
		f(c)
	}
	vs := c.run(t)
	if len(vs) > 0 {
		t.Errorf("seed %d: %d violations:\n%s", c.Seed, len(vs), checker.Report(vs, 30))
	}
	if len(c.fenceChanged) > 0 {
		t.Errorf("seed %d: %d extends answered another fencing token than their acquire: %s",
			c.Seed, len(c.fenceChanged), strings.Join(c.fenceChanged, "; "))
	}
	return c
}

// TestMutualExclusion: under a seeded schedule of node and network faults,
// no two holders' safe windows of one lock overlap and fencing tokens
// increase in window order (docs/safety.md "What is guaranteed"): 12
// clients on 5 locks in the soak (safeRun).
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	safeRun(t, soakSeed(t), 12, 5, 0, soakDuration(t, 20*time.Second))
}

// TestSemaphoreExclusion: at no instant are more than limit holders of a
// semaphore inside their safe windows, and fences are ordered
// (docs/safety.md "Semaphores"): 14 clients on 3 semaphores of limit 2,
// then of limit 3, in the soak (safeRun; REDLOCKD_SOAK_DURATION is shared
// between the two), and the limit reached (the run exercises concurrent
// holders).
func TestSemaphoreExclusion(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	seed, d := soakSeed(t), soakDuration(t, 20*time.Second)/2
	for _, limit := range []int{2, 3} {
		t.Run(fmt.Sprintf("limit%d", limit), func(t *testing.T) {
			safeRun(t, seed, 14, 3, limit, d, func(c *contention) {
				c.Little = func(c *contention) string {
					if c.mostAtOnce() < limit {
						return fmt.Sprintf("most holders at once %v: the limit %d was never reached", c.peak, limit)
					}
					return ""
				}
			})
		})
	}
}

// unsafeNodeTimeout is the node timeout of catchUnsafe's gateway. Time is
// not what catchUnsafe tests (a majority restarted empty loses holds whatever
// the timeout, and a restarting node refuses connections at once): it is long
// enough that a gateway starved of CPU on a busy machine still gets its
// rounds answered, so the runs hold enough windows to catch a violation.
const unsafeNodeTimeout = 2 * time.Second

// catchUnsafe runs clients on resources (semaphores of limit when limit > 0)
// with restart quarantine off, 3 nodes, and a schedule that restarts a
// majority of them at once every few hundred milliseconds: holds are lost
// while their holders rely on them, and the checker must say so within 3
// attempts. set, if any, change the run (e.g. rw).
func catchUnsafe(t *testing.T, clients, resources, limit int, set ...func(*contention)) {
	seed := soakSeed(t)
	for attempt := range 3 {
		c := &contention{
			Nodes:   3,
			Flags:   []string{"--restart-quarantine", "off", "--node-timeout", unsafeNodeTimeout.String()},
			Clients: clients, Resources: resources, Limit: limit,
			TTL: [2]int{1000, 2000}, Waits: []int{0, 300, 1000},
			Duration: 5 * time.Second,
			Seed:     seed + uint64(attempt),
		}
		c.Schedule = func(rng *rand.Rand, d time.Duration) []faultEvent { return majorityRestarts(rng, d, c.Nodes) }
		for _, f := range set {
			f(c)
		}
		vs := c.run(t)
		if len(vs) > 0 {
			t.Logf("the checker caught the unsafe configuration (seed %d):\n%s", c.Seed, checker.Report(vs, 10))
			return
		}
		t.Logf("attempt %d (seed %d): no violation this time", attempt, c.Seed)
	}
	t.Fatal("the checker found no violation in an unsafe configuration: it cannot fail")
}

// TestCheckerCatchesUnsafeConfig: with the restart quarantine off, nodes
// restarting empty break mutual exclusion (docs/safety.md "Assumptions"),
// and the soak's checker reports it (docs/safety.md "How it is tested"):
// catchUnsafe with 6 clients on 2 locks.
func TestCheckerCatchesUnsafeConfig(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	catchUnsafe(t, 6, 2, 0)
}

// TestCheckerCatchesUnsafeSemaphore: the checker reports the broken limit
// of semaphores under the unsafe configuration (docs/safety.md
// "Semaphores"): catchUnsafe with 8 clients on 2 semaphores of limit 2.
func TestCheckerCatchesUnsafeSemaphore(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	catchUnsafe(t, 8, 2, 2)
}

// mostAtOnce is the most holders of one resource at once in c's run (0
// with no window).
func (c *contention) mostAtOnce() int {
	return slices.Max(append(slices.Collect(maps.Values(c.peak)), 0))
}

// rw makes a contention run's clients take read-write locks; a run where
// readers never held a lock together, or where none or all were readers,
// proves little.
func rw(c *contention) {
	c.RW = true
	c.Little = func(c *contention) string {
		if reads := c.stats["acquired read"]; c.mostAtOnce() < 2 || reads == 0 || reads == c.stats["acquired"] {
			return fmt.Sprintf("most holders at once %v, %d of %d acquires a reader's: the run did not mix readers and writers", c.peak, reads, c.stats["acquired"])
		}
		return ""
	}
}

// multi makes half the acquires of a contention take several locks at
// once; a run where none did, or all did, proves little.
func multi(c *contention) {
	c.Multi = true
	c.Little = func(c *contention) string {
		if several := c.stats["acquired several"]; several == 0 || several == c.stats["acquired"] {
			return fmt.Sprintf("%d of %d acquires took several locks: the run did not mix them", several, c.stats["acquired"])
		}
		return ""
	}
}

// TestMultiExclusion: no two holders of a resource overlap, whether they
// took it alone or with others, and each resource's fences increase
// (docs/several-resources.md "How it is tested"): 12 clients on 5 locks in
// the soak (safeRun), half of the acquires taking 2 or 3 of them at once
// (all or none).
func TestMultiExclusion(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	safeRun(t, soakSeed(t), 12, 5, 0, soakDuration(t, 20*time.Second), multi)
}

// TestCheckerCatchesUnsafeMulti: the checker reports the broken exclusion
// of locks on several resources under the unsafe configuration
// (docs/several-resources.md "How it is tested"): catchUnsafe with 8 clients
// on 3 locks, taken alone or several at once.
func TestCheckerCatchesUnsafeMulti(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	catchUnsafe(t, 8, 3, 0, multi)
}

// TestRWExclusion: no writer's safe window overlaps any other of its
// resource, fences are ordered, and readers do hold a lock together
// (docs/read-write-locks.md "How it is tested"): 12 clients on 3 read-write locks in
// the soak (safeRun), each acquire a reader's (one in three) or a writer's.
func TestRWExclusion(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	// Longer waits than the soak's locks: a writer that waits keeps new
	// readers out, but those holding (TTLs up to 800ms) keep a short waiter
	// out too, and readers would take most windows.
	safeRun(t, soakSeed(t), 12, 3, 0, soakDuration(t, 20*time.Second), rw,
		func(c *contention) { c.Waits = []int{0, 100, 400} })
}

// TestCheckerCatchesUnsafeRW: the checker reports the broken exclusion of
// read-write locks under the unsafe configuration (docs/read-write-locks.md
// "How it is tested"): catchUnsafe with 8 clients on 2 read-write locks.
func TestCheckerCatchesUnsafeRW(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	catchUnsafe(t, 8, 2, 0, rw)
}
