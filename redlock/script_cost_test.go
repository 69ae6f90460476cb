package redlock

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/fencedfloor"
	"github.com/redlockd/redlockd/internal/redistest"
)

// BenchmarkScriptCost measures what one uncontended acquire+release costs
// one redis-server, one cycle at a time: the lock's scripts (acquire.lua,
// release.lua); the same commands with none of their logic (fencedfloor's
// scripts: the floor of any script pair that fences); and redsync's cycle
// (SET NX, then a compare-and-delete script). It reports the time Redis
// counts inside the calls (INFO commandstats usec of the calls a client
// sent, per cycle) and the CPU time of its process (/proc, per cycle), hot
// (back to back) and paused (500µs between calls, as at C=1 behind a
// gateway, where each call finds the node idle and its caches cold).
// docs/measuring.md ("Proposed targets") reads it.
func BenchmarkScriptCost(b *testing.B) {
	s := redistest.Start(b)
	cl := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2})
	b.Cleanup(func() { cl.Close() })
	unlock := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	keys := []string{"lock:x", "fence:x", "readers:x", "rmeta:x", "wwait:x"}
	pair := func(acq, rel *redis.Script) func(b *testing.B, tok string) error {
		return func(b *testing.B, tok string) error {
			err := acq.Run(b.Context(), cl, keys, tok, 10000, "", 0, 0, 60000, time.Now().UnixMicro(), "w:abcdefgh").Err()
			if err == nil {
				err = rel.Run(b.Context(), cl, keys[:3], tok, "ch", 60000).Err()
			}
			return err
		}
	}
	cycles := []struct {
		name     string
		topLevel []string // the commands of INFO commandstats that a client sent
		cycle    func(b *testing.B, tok string) error
	}{
		{"lock", []string{"evalsha"}, pair(scriptAcquire, scriptRelease)},
		{"fenced-floor", []string{"evalsha"}, pair(fencedfloor.Acquire, fencedfloor.Release)},
		{"redsync", []string{"set", "evalsha"}, func(b *testing.B, tok string) error {
			err := cl.SetNX(b.Context(), "rs:x", tok, 10*time.Second).Err()
			if err == nil {
				err = unlock.Run(b.Context(), cl, []string{"rs:x"}, tok).Err()
			}
			return err
		}},
	}
	for _, pause := range []time.Duration{0, 500 * time.Microsecond} {
		for _, c := range cycles {
			b.Run(fmt.Sprintf("%s/pause=%v", c.name, pause), func(b *testing.B) {
				if err := c.cycle(b, "warm"); err != nil { // loads the scripts
					b.Fatal(err)
				}
				usec0, cpu0 := redisSpent(b, s, c.topLevel)
				n := 0
				for b.Loop() {
					if err := c.cycle(b, fmt.Sprint("tok", n)); err != nil {
						b.Fatal(err)
					}
					n++
					time.Sleep(pause)
				}
				usec1, cpu1 := redisSpent(b, s, c.topLevel)
				b.ReportMetric(float64(usec1-usec0)/float64(n), "redis-usec/cycle")
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(n), "redis-cpu-µs/cycle")
			})
		}
	}
}

// redisSpent is the usec of INFO commandstats of s's commands named, and the
// CPU time of its process so far.
func redisSpent(b *testing.B, s *redistest.Server, names []string) (usec int64, cpu time.Duration) {
	st, err := s.CommandStats(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	for name, c := range st {
		if slices.Contains(names, name) {
			usec += c.Usec
		}
	}
	if cpu, err = redistest.CPUTime(s.PID()); err != nil {
		b.Fatal(err)
	}
	return usec, cpu
}
