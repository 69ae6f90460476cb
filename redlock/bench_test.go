package redlock

import (
	"cmp"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// BenchmarkCycle measures acquire+release against 5 real redis-servers, one
// at a time and from parallel goroutines, with batching and without it (each
// node command its own goroutine and round trip).
func BenchmarkCycle(b *testing.B) {
	for _, naive := range []bool{false, true} {
		name := "batching"
		if naive {
			name = "naive"
		}
		b.Run(name, func(b *testing.B) {
			bc := benchCluster(b, Options{NoBatching: naive})
			cl := bc.c
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				res := fmt.Sprintf("bench-serial-%t", naive)
				before := bc.redisCPU(b)
				for b.Loop() {
					l, err := cl.Acquire(b.Context(), res, AcquireOptions{TTL: 10 * time.Second})
					if err != nil {
						b.Fatal(err)
					}
					if err := cl.Release(b.Context(), "", res, l.Token); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((bc.redisCPU(b)-before).Microseconds())/float64(b.N), "redis-cpu-µs/cycle")
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(32) // 64 goroutines on 2 cores
				var seq atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					res := fmt.Sprintf("bench-par-%t-%d", naive, seq.Add(1))
					for pb.Next() {
						l, err := cl.Acquire(b.Context(), res, AcquireOptions{TTL: 10 * time.Second})
						if err != nil {
							continue // a loaded box times a node out now and then
						}
						_ = cl.Release(b.Context(), "", res, l.Token)
					}
				})
			})
		})
	}
}

// benchCluster is a coordinator over 5 nodes with the production node
// timeout unless opts sets one: a benchmark measures what a gateway does.
func benchCluster(b *testing.B, opts Options) *cluster {
	b.Helper()
	opts.NodeTimeout = cmp.Or(opts.NodeTimeout, DefaultNodeTimeout)
	return newCluster(b, 5, opts)
}

// redisCPU is the CPU time the cluster's redis-servers have used so far,
// all together (as the bench's "Redis CPU" of the 5 nodes).
func (cl *cluster) redisCPU(b *testing.B) (sum time.Duration) {
	for _, s := range cl.servers {
		cpu, err := redistest.CPUTime(s.PID())
		if err != nil {
			b.Fatal(err)
		}
		sum += cpu
	}
	return sum
}

// BenchmarkPermitCycle measures acquire+release of a permit of an idle
// semaphore of limit 4 beside a lock's, one at a time, on 5 real
// redis-servers (issue 21: within 1.3 times a lock's cycle), and the CPU
// time of the redis-servers per cycle. Max TTL is 2s, so that what a
// release leaves for max TTL (a lock's record, a semaphore's releases)
// expires within a run of a few seconds (-benchtime), its expiry counted.
func BenchmarkPermitCycle(b *testing.B) {
	bc := benchCluster(b, Options{MaxTTL: 2 * time.Second, DefaultTTL: time.Second})
	cl := bc.c
	cycles := func(b *testing.B, cycle func() error) {
		before := bc.redisCPU(b)
		for b.Loop() {
			if err := cycle(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((bc.redisCPU(b)-before).Microseconds())/float64(b.N), "redis-cpu-µs/cycle")
	}
	b.Run("lock", func(b *testing.B) {
		cycles(b, func() error {
			l, err := cl.Acquire(b.Context(), "bench-lock", AcquireOptions{})
			if err != nil {
				return err
			}
			return cl.Release(b.Context(), "", "bench-lock", l.Token)
		})
	})
	b.Run("permit", func(b *testing.B) {
		cycles(b, func() error {
			p, err := cl.AcquirePermit(b.Context(), "bench-sem", PermitOptions{Limit: 4})
			if err != nil {
				return err
			}
			return cl.ReleasePermit(b.Context(), "", "bench-sem", p.Token)
		})
	})
}
