package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/promtest"
	"github.com/redlockd/redlockd/internal/redistest"
)

// sample is a sorted list of durations.
type sample []time.Duration

// pct is the p-quantile, 0 when there are none.
func (s sample) pct(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// mode is a way to lock (lab.open), run by c workers for the floors of
// group. With a hold, the workers share one resource, ask for it with wait
// and hold it that long (the contended runs); without, each has its own.
// With a limit, the resources are semaphores of that limit, whose permits
// the workers take through the gateway. With readers, the first readers
// workers take the contended lock as readers, the others as writers. With
// pairs, each cycle takes two of that many contended locks, at random. A mode
// in halves runs twice, for half the duration each time, and its two results
// are added up. A paced mode's workers each start a cycle once per pace, or
// at once when behind, their first ones spread over a pace: measure sets it
// to a worker's mean cycle in the gateway run of the same group and round
// (its half), and the pace of the halves added up to the gateway's over both.
type mode struct {
	group, name       string
	c, limit, readers int
	pairs             int
	hold, wait        time.Duration
	halves            bool
	paced             bool
	pace              time.Duration
	// Not what the servers spent: the gray scenarios pause nodes, whose
	// INFO would not answer.
	noCost bool
}

// turn is one cycle that acquired and released the lock: when the acquire
// was sent, its 201 read, the release sent and its 204 read; read for a
// reader's.
type turn struct {
	worker                               int
	read                                 bool
	start, acquired, releasing, released time.Time
	half                                 int // 1 in a mode's second half (see add)
}

// result is one run's figures.
type result struct {
	mode
	cycles, errors int
	lastErr        string
	duration       time.Duration
	lat            sample
	turns          []turn
	cost           cost // what the servers spent over the run; none with noCost
	nodes          int  // the nodes the mode uses, the first ones (mode.redisNodes)
}

func (r result) perSecond() float64 { return float64(r.cycles) / r.duration.Seconds() }

// meanCycle is the run's duration over its cycles (the duration when none).
func (r result) meanCycle() time.Duration { return r.duration / time.Duration(max(r.cycles, 1)) }

// add adds x, another run of the same mode, to r.
func (r *result) add(x result) {
	r.cycles, r.errors, r.duration = r.cycles+x.cycles, r.errors+x.errors, r.duration+x.duration
	r.lastErr = cmp.Or(x.lastErr, r.lastErr)
	for i := range x.turns {
		x.turns[i].half = 1 // its hand-offs are its own (see handoffs)
	}
	r.lat, r.turns = append(r.lat, x.lat...), append(r.turns, x.turns...)
	r.cost = r.cost.plus(x.cost)
	slices.Sort(r.lat)
}

// merge adds r to runs: to the run of the same group and name, as its
// second half, if there is one, else as a run of its own. It returns runs
// and r's place in them.
func merge(runs []result, r result) ([]result, int) {
	if j := slices.IndexFunc(runs, func(x result) bool { return x.group == r.group && x.name == r.name }); j >= 0 {
		runs[j].add(r)
		return runs, j
	}
	return append(runs, r), len(runs)
}

// run runs the mode's cycles on resources named prefix... for d and times
// each, and reads what the servers spent meanwhile. A cycle cut off by the
// end of the run is not counted.
func (m mode) run(ctx context.Context, l *lab, prefix string, d time.Duration) (result, error) {
	lock, done, server, err := l.open(m)
	if err != nil {
		return result{}, err
	}
	defer done()
	var before cost
	if !m.noCost {
		if before, err = l.spent(ctx, server); err != nil {
			return result{}, err
		}
	}
	read := lock
	if m.readers > 0 {
		read = gateway(l.client, client.AcquireOptions{TTL: 10 * time.Second, Wait: m.wait, Mode: client.ModeRead})
	}
	r := m.drive(ctx, lock, read, prefix, d)
	r.nodes = m.redisNodes(l)
	if !m.noCost {
		after, err := l.spent(context.WithoutCancel(ctx), server)
		if err != nil {
			return result{}, err
		}
		r.cost = after.since(before)
	}
	r.lat = spans(r.turns, func(t turn) time.Duration { return t.released.Sub(t.start) })
	r.cycles = len(r.lat)
	return r, nil
}

// errorPause bounds a worker's pause after a failed cycle, which lasts
// from half of it to all of it, as a client backs off before it tries again
// (why: docs/measuring.md, What a run prints).
const errorPause = 100 * time.Millisecond

// drive runs m's c workers for d, each cycling with lock (the first readers
// ones with read) on resources named prefix..., and returns their turns and
// errors. A worker pauses after an error (errorPause), and then takes a new
// key: a lock whose release failed must not refuse it every cycle until its
// TTL ends.
func (m mode) drive(ctx context.Context, lock, read locker, prefix string, d time.Duration) result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	end, _ := ctx.Deadline()
	r := result{mode: m, duration: d}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range m.c {
		lock := lock
		if w < m.readers {
			lock = read
		}
		wg.Go(func() {
			// A paced worker's next start: the workers' first ones spread
			// over a pace.
			due := time.Now().Add(m.pace * time.Duration(w) / time.Duration(m.c))
			time.Sleep(time.Until(due))
			for key := strconv.Itoa(w); ctx.Err() == nil; {
				res := prefix + key
				switch {
				case m.pairs > 0:
					p := rand.Perm(m.pairs)[:2]
					slices.Sort(p)
					res = fmt.Sprintf("%sp%d,%sp%d", prefix, p[0], prefix, p[1])
				case m.hold > 0:
					res = prefix + "contended"
				}
				t, err := lockCycle(ctx, lock, res, m.hold)
				if ctx.Err() != nil || !time.Now().Before(end) {
					return
				}
				mu.Lock()
				if err == nil {
					t.worker, t.read = w, w < m.readers
					r.turns = append(r.turns, t)
				} else {
					r.errors, r.lastErr = r.errors+1, strings.ReplaceAll(err.Error(), "\n", "; ")
					key = fmt.Sprintf("%d-%d", w, r.errors)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(errorPause/2 + rand.N(errorPause/2))
				}
				if m.pace > 0 {
					due = due.Add(m.pace)
					time.Sleep(time.Until(due)) // none when behind
				}
			}
		})
	}
	wg.Wait()
	return r
}

// spans are the spans of turns that span measures, sorted.
func spans(turns []turn, span func(turn) time.Duration) (s sample) {
	for _, t := range turns {
		s = append(s, span(t))
	}
	slices.Sort(s)
	return s
}

// lockCycle takes the lock on res, holds it for hold and releases it. The
// turn says when it started, when the lock was acquired (zero if it was not)
// and released. The release goes on after ctx ends, so that the next run
// finds the lock free, and gives up after 5s.
func lockCycle(ctx context.Context, lock locker, res string, hold time.Duration) (t turn, err error) {
	t.start = time.Now()
	unlock, err := lock(ctx, res)
	if err != nil {
		return t, fmt.Errorf("acquire: %w", err)
	}
	t.acquired = time.Now()
	time.Sleep(hold)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	t.releasing = time.Now()
	if err := unlock(ctx); err != nil {
		return t, fmt.Errorf("release: %w", err)
	}
	t.released = time.Now()
	return t, nil
}

// handoffs are the times from one holder's 204 to the next holder's 201,
// and the share of acquisitions won by the holder just before, within each
// half of a mode run in halves (the lock is idle between them).
func handoffs(turns []turn) (times sample, same float64) {
	slices.SortFunc(turns, func(a, b turn) int { return cmp.Or(cmp.Compare(a.half, b.half), a.acquired.Compare(b.acquired)) })
	for i := 1; i < len(turns); i++ {
		if turns[i].half != turns[i-1].half {
			continue
		}
		times = append(times, max(0, turns[i].acquired.Sub(turns[i-1].released)))
		if turns[i].worker == turns[i-1].worker {
			same++
		}
	}
	slices.Sort(times)
	return times, same / float64(max(1, len(times)))
}

// permitHandoffs are, as handoffs for a lock, the times from a holder's
// 204 to the next holder's 201: for each acquisition of a permit that
// waited, from the latest 204 before its 201 (one it waited for: it came
// after its acquire was sent) to that 201.
func permitHandoffs(turns []turn) (times sample) {
	releases := make([]time.Time, 0, len(turns))
	for _, t := range turns {
		releases = append(releases, t.released)
	}
	slices.SortFunc(releases, time.Time.Compare)
	for _, t := range turns {
		i, _ := slices.BinarySearchFunc(releases, t.acquired, time.Time.Compare) // the first not before the 201
		if i > 0 && releases[i-1].After(t.start) {
			times = append(times, t.acquired.Sub(releases[i-1]))
		}
	}
	slices.Sort(times)
	return times
}

// idleWhileWaiting is the share of the time during which fewer than limit
// permits were held, and the share of the permits' time (limit × the time)
// that they were idle, (from a 201 read to its release's 204, as a lock's
// hand-off counts: the permit is not free before its release ran) while a client
// waited (from its acquire sent to its 201 read). The time runs from the
// first 201 to the earliest of the workers' last 204s: cycles cut off by the
// end of the run are not in turns, so the held and waiting after that are
// not known.
func idleWhileWaiting(turns []turn, limit int) (any, permits float64) {
	type event struct {
		at            time.Time
		held, waiting int
	}
	var events []event
	var first, end time.Time
	last := map[int]time.Time{} // by worker
	for _, t := range turns {
		events = append(events, event{t.start, 0, 1}, event{t.acquired, 1, -1}, event{t.released, -1, 0})
		if first.IsZero() || t.acquired.Before(first) {
			first = t.acquired
		}
		if t.released.After(last[t.worker]) {
			last[t.worker] = t.released
		}
	}
	for _, at := range last {
		if end.IsZero() || at.Before(end) {
			end = at
		}
	}
	if !end.After(first) {
		return 1, 1
	}
	slices.SortFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	var idle, idlePermits time.Duration
	held, waiting, prev := 0, 0, first
	for _, e := range events {
		at := e.at // within [first, end]
		if at.Before(first) {
			at = first
		} else if at.After(end) {
			at = end
		}
		if held < limit && waiting > 0 {
			idle += at.Sub(prev)
			idlePermits += time.Duration(limit-held) * at.Sub(prev)
		}
		prev, held, waiting = at, held+e.held, waiting+e.waiting
	}
	span := float64(end.Sub(first))
	return float64(idle) / span, float64(idlePermits) / (float64(limit) * span)
}

// shortWait is the wait of the waiters that must time out.
const shortWait = time.Second

// waiting is what the waiters run measured.
type waiting struct {
	waiters, short int
	// served got the lock (and released it at once); timedOut got 409, or
	// 503 when the last round found the nodes too slow, after their wait:
	// both say "not acquired"; early timed out before their wait.
	served, timedOut, early, other int
	lastErr                        string
	idleCommands                   float64
	// The gateway's memory before the waiters and while the long-waiting
	// ones (waiters - short) wait: what each waiting acquire costs it.
	before, during memory
}

// perWaiter is what a waiting acquire costs the gateway: its peak RSS over
// the waiters, and the goroutine stacks (in bytes) and goroutines over those
// waiting when during was read.
func (w *waiting) perWaiter() (rss, stacks, goroutines float64) {
	long := float64(w.waiters - w.short)
	return float64(w.during.status.VmHWM-w.before.status.VmRSS) / float64(w.waiters),
		(w.during.stacks - w.before.stacks) / long, (w.during.goroutines - w.before.goroutines) / long
}

// memory is what the gateway's process and Go runtime hold at one time.
type memory struct {
	status             procfs.ProcStatus // its VmRSS, and VmHWM: the peak so far
	stacks, goroutines float64           // go_memstats_stack_inuse_bytes and go_goroutines of its /metrics
}

// memoryOf reads the gateway's memory.
func memoryOf(ctx context.Context, l *lab) (memory, error) {
	var m memory
	p, err := procfs.NewProc(l.pid)
	if err == nil {
		m.status, err = p.NewStatus()
	}
	if err != nil {
		return m, err
	}
	ss, err := metricsOf(ctx, l)
	if err != nil {
		return m, err
	}
	var ok1, ok2 bool
	m.stacks, ok1 = ss.Sum("go_memstats_stack_inuse_bytes")
	m.goroutines, ok2 = ss.Sum("go_goroutines")
	if !ok1 || !ok2 {
		return m, errors.New("/metrics has no go_memstats_stack_inuse_bytes or go_goroutines")
	}
	return m, nil
}

// gomaxprocs reads the GOMAXPROCS the gateway runs at.
func gomaxprocs(ctx context.Context, l *lab) (int, error) {
	ss, err := metricsOf(ctx, l)
	if err != nil {
		return 0, err
	}
	n, ok := ss.Sum("go_sched_gomaxprocs_threads")
	if !ok {
		return 0, errors.New("/metrics has no go_sched_gomaxprocs_threads")
	}
	return int(n), nil
}

// metricsOf reads the gateway's /metrics.
func metricsOf(ctx context.Context, l *lab) (promtest.Samples, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.addr+"/metrics", nil)
	res, err := (&http.Client{Transport: l.tr}).Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	return promtest.Parse(string(body))
}

// waitMany sends n waiting acquires of one lock that a holder keeps (a tenth
// with a wait of shortWait, the others long enough to be served in turn),
// measures the gateway's memory and the nodes' commands/s over idle while
// they wait, then releases the lock and waits for every waiter.
func waitMany(ctx context.Context, l *lab, resource string, n int, idle time.Duration) (*waiting, error) {
	r := &waiting{waiters: n, short: n / 10}
	defer l.closeConns()
	holder, err := l.client.Acquire(ctx, resource, client.AcquireOptions{TTL: 10 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("waiters: the holder's acquire: %w", err)
	}
	if r.before, err = memoryOf(ctx, l); err != nil {
		return nil, fmt.Errorf("waiters: the gateway's memory: %w", err)
	}
	var mu sync.Mutex
	var wg, shortDone sync.WaitGroup
	written := make(chan struct{}, n)
	shortDone.Add(r.short)
	for i := range n {
		wg.Go(func() {
			wrote := sync.OnceFunc(func() { written <- struct{}{} })
			defer wrote() // also when the request failed before it was written
			wait := 10 * time.Minute
			if i < r.short {
				wait = shortWait
				defer shortDone.Done()
			}
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote() }}
			t, err := lockCycle(httptrace.WithClientTrace(ctx, trace),
				gateway(l.client, client.AcquireOptions{TTL: 10 * time.Second, Wait: wait}), resource, 0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && i >= r.short:
				r.served++
			case t.acquired.IsZero() && (errors.Is(err, client.ErrLockHeld) || errors.Is(err, client.ErrQuorumUnavailable)) && i < r.short:
				r.timedOut++
				if time.Since(t.start) < shortWait {
					r.early++
				}
			default:
				r.other++
				r.lastErr = fmt.Sprintf("waiter %d (wait %v): %v", i, wait, err)
			}
		})
		if i%500 == 499 || i == n-1 { // in steps, so that the listen backlog does not overflow
			for range i%500 + 1 {
				<-written
			}
		}
	}
	shortDone.Wait()
	if r.idleCommands, err = idleCommands(ctx, l.servers, idle); err != nil {
		return nil, err
	}
	if r.during, err = memoryOf(ctx, l); err != nil {
		return nil, fmt.Errorf("waiters: the gateway's memory: %w", err)
	}
	if err := l.client.Release(ctx, resource, holder.Token); err != nil {
		return nil, fmt.Errorf("waiters: the holder's release: %w", err)
	}
	wg.Wait()
	return r, nil
}

// idleCommands returns the commands per second that the nodes processed
// over d, less the tool's own INFO.
func idleCommands(ctx context.Context, nodes []*redistest.Server, d time.Duration) (float64, error) {
	var total [2]int64
	for i := range total {
		time.Sleep(time.Duration(i) * d) // the window, between the two counts
		for _, s := range nodes {
			info := s.Client().InfoMap(ctx, "stats")
			n, err := strconv.ParseInt(info.Item("Stats", "total_commands_processed"), 10, 64)
			if err = cmp.Or(info.Err(), err); err != nil {
				return 0, fmt.Errorf("INFO stats of %s: %v", s.Addr(), err)
			}
			total[i] += n
		}
	}
	return float64(total[1]-total[0]-int64(len(nodes))) / d.Seconds(), nil
}
