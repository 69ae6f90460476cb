package redlock

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/fencedfloor"
	"github.com/redlockd/redlockd/internal/redistest"
)

// countInstructions makes BenchmarkScriptCost count Redis's instructions.
var countInstructions = flag.Bool("instructions", false, "BenchmarkScriptCost: count the instructions of Redis's main thread")

// BenchmarkScriptCost measures what one uncontended acquire+release costs
// one redis-server, one cycle at a time: the lock's scripts (acquire.lua,
// release.lua), a lone reader's (read_acquire.lua, release.lua); the same commands with none of their logic (fencedfloor's
// scripts: the floor of any script pair that fences); and redsync's cycle
// (SET NX, then a compare-and-delete script). It reports the time Redis
// counts inside the calls (INFO commandstats usec of the calls a client
// sent, per cycle), the CPU time of its process (/proc, per cycle) and,
// with -args -instructions where the CPU's counters can be read, the
// instructions its main thread retires per cycle in user space and in the
// kernel (thousands: they barely move with the machine's load, as time does;
// counting them slows the node on a VM that traps the counters, so its times
// are then not comparable with a run without), hot (back to back) and paused
// (500µs between calls, as at C=1 behind a gateway, where each call finds
// the node idle and its caches cold). Tokens are the gateway's (NewToken):
// the record's work grows with their length. docs/measuring.md ("Proposed
// targets") reads it.
func BenchmarkScriptCost(b *testing.B) {
	s := redistest.Start(b)
	cl := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2})
	b.Cleanup(func() { cl.Close() })
	unlock := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	keys := []string{"lock:x", "fence:x", "readers:x", "rmeta:x", "wwait:x"}
	releaseKeys := []string{keys[0], keys[2], keys[3]} // release.lua's: [lock, readers, rmeta]
	pair := func(acq, rel *redis.Script) func(b *testing.B, tok string) error {
		return func(b *testing.B, tok string) error {
			err := acq.Run(b.Context(), cl, keys, tok, 10000, "", 0, 0, 60000, time.Now().UnixMicro(), "w:abcdefgh").Err()
			if err == nil {
				err = rel.Run(b.Context(), cl, releaseKeys, tok, "ch", 60000, fingerprint(tok)).Err()
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
		{"read", []string{"evalsha"}, pair(scriptRead, scriptRelease)}, // a lone reader's
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
				var ins *redistest.Instructions
				insErr := errors.New("not asked (-args -instructions)")
				if *countInstructions {
					if ins, insErr = redistest.CountInstructions(s.PID()); insErr == nil {
						defer ins.Close()
					}
				}
				usec0, cpu0 := redisSpent(b, s, c.topLevel)
				user0, kernel0 := instructionsSpent(b, ins)
				n := 0
				for b.Loop() {
					if err := c.cycle(b, NewToken()); err != nil {
						b.Fatal(err)
					}
					n++
					time.Sleep(pause)
				}
				usec1, cpu1 := redisSpent(b, s, c.topLevel)
				user1, kernel1 := instructionsSpent(b, ins)
				b.ReportMetric(float64(usec1-usec0)/float64(n), "redis-usec/cycle")
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(n), "redis-cpu-µs/cycle")
				if insErr == nil {
					b.ReportMetric(float64(user1-user0)/1e3/float64(n), "redis-user-kinstr/cycle")
					b.ReportMetric(float64(kernel1-kernel0)/1e3/float64(n), "redis-kernel-kinstr/cycle")
				} else if pause == 0 {
					b.Logf("no instruction counts: %v", insErr)
				}
			})
		}
	}
}

// instructionsSpent is what ins counted so far (nothing when it is nil).
func instructionsSpent(b *testing.B, ins *redistest.Instructions) (user, kernel uint64) {
	if ins == nil {
		return 0, 0
	}
	user, kernel, err := ins.Read()
	if err != nil {
		b.Fatal(err)
	}
	return user, kernel
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
