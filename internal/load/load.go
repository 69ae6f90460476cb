// Package load drives lock cycles (acquire then release) from C workers for
// a fixed time and reports throughput and latency percentiles. It is used by
// the load test in tests/ to compare the gateway over HTTP with the
// in-process redlock library in the same run.
package load

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Cycle runs one acquire+release cycle for worker w.
type Cycle func(ctx context.Context, w int) error

// Result is one run's figures.
type Result struct {
	Name     string
	C        int
	Cycles   int
	Errors   int
	FirstErr string // the first error, if any
	Duration time.Duration
	P50      time.Duration
	P90      time.Duration
	P99      time.Duration
	Max      time.Duration
}

// PerSecond is completed cycles per second.
func (r Result) PerSecond() float64 { return float64(r.Cycles) / r.Duration.Seconds() }

// Run runs cycle from c workers for d and measures each cycle. It stops by
// itself after d (or when ctx ends).
func Run(ctx context.Context, name string, c int, d time.Duration, cycle Cycle) Result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	lat := make([][]time.Duration, c)
	errs := make([]int, c)
	var firstErr sync.Once
	var first string
	var wg sync.WaitGroup
	start := time.Now()
	end, _ := ctx.Deadline() // a cycle may see it pass before ctx ends
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				err := cycle(ctx, w)
				if ctx.Err() != nil || !time.Now().Before(end) {
					return // cut off by the end of the run: not counted
				}
				if err != nil {
					errs[w]++
					firstErr.Do(func() { first = err.Error() })
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	r := Result{Name: name, C: c, Duration: time.Since(start), FirstErr: first}
	var all []time.Duration
	for w := range c {
		all = append(all, lat[w]...)
		r.Errors += errs[w]
	}
	slices.Sort(all)
	r.Cycles = len(all)
	if len(all) > 0 {
		pct := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
		r.P50, r.P90, r.P99, r.Max = pct(0.50), pct(0.90), pct(0.99), all[len(all)-1]
	}
	return r
}

// RunOnProcs is Run with the process on procs Ps (GOMAXPROCS) for the run,
// restored afterwards; procs 0 leaves GOMAXPROCS alone. Nothing else in the
// process may need the other Ps meanwhile.
//
// The HTTP modes use one P. Their workers only wait for a server in another
// process; on one P, the thread that takes the ready connections from the
// network poller runs their workers in turn instead of waking a thread for
// each, and so leaves more of a shared machine to the server measured. At
// C = 64 against the gateway on 2 cores that also run 5 redis-servers, the
// load generator took 0.19 cores instead of about 0.3, and the gateway gave
// 4 % more cycles/s (3 rounds each).
func RunOnProcs(ctx context.Context, name string, c int, d time.Duration, procs int, cycle Cycle) Result {
	if procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	}
	return Run(ctx, name, c, d, cycle)
}

// Table formats results with the ratio of each row's cycles/s to the first
// row of the same concurrency.
func Table(results []Result) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tC\tcycles\terrors\tcycles/s\tratio\tp50\tp90\tp99\tmax\t")
	base := map[int]float64{}
	for _, r := range results {
		if _, ok := base[r.C]; !ok {
			base[r.C] = r.PerSecond()
		}
		ms := func(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000) }
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t\n", r.Name, r.C, r.Cycles, r.Errors,
			r.PerSecond(), r.PerSecond()/base[r.C], ms(r.P50), ms(r.P90), ms(r.P99), ms(r.Max))
	}
	tw.Flush()
	for _, r := range results {
		if r.FirstErr != "" {
			fmt.Fprintf(&b, "%s C=%d: %d errors, the first: %s\n", r.Name, r.C, r.Errors, strings.ReplaceAll(r.FirstErr, "\n", "; "))
		}
	}
	return b.String()
}

// NewHTTPClient returns a client that keeps c connections alive.
func NewHTTPClient(c int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = c * 2
	tr.MaxIdleConnsPerHost = c * 2
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}
