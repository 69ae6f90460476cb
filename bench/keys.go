package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/client"
)

// keysFigures is what one run of the keys group measured: acquire+release
// cycles through the gateway, and the keys they left on node 0.
type keysFigures struct {
	cycles, errors int
	lastErr        string
	keys           int           // keys of the cycles' resources on node 0
	forever        int           // of them, keys without a TTL
	longest        time.Duration // the longest TTL among them
	bytes          int64         // used_memory's growth on node 0 (noise when few keys are left)
}

// semKeysLimit is the limit of the keys group's semaphore, and semKeysMost
// the keys it may leave on a node however often its permits are released:
// its permits' lock keys, its fence counter, limit, permits, holders,
// waiting marker and releases (see docs/safety.md, Keys).
const (
	semKeysLimit = 4
	semKeysMost  = semKeysLimit + 6
)

// measureKeysGroup runs the keys group: one acquire+release cycle on each of
// names names used once, c at a time, then names/10 permit cycles of one
// semaphore of limit semKeysLimit, a worker per permit.
func measureKeysGroup(ctx context.Context, l *lab, prefix string, names, c int, progress io.Writer) (keys, semKeys *keysFigures, err error) {
	name := func(i int64) string { return prefix + "keys-" + strconv.FormatInt(i, 10) }
	lock := gateway(l.client, client.AcquireOptions{TTL: time.Minute})
	if keys, err = measureKeys(ctx, l, names, c, lock, name, "redlockd:*:/"+prefix+"keys-*"); err != nil {
		return nil, nil, err
	}
	sem := prefix + "keysem"
	fmt.Fprintf(progress, "%d permit cycles of one semaphore of limit %d, at C=%d\n", names/10, semKeysLimit, semKeysLimit)
	// A worker per permit; an acquire whose rounds find none free at once
	// (a permit released on a quorum, not yet on every node) waits, as a
	// client would, instead of counting a 409.
	permit := permits(l.client, client.PermitOptions{Limit: semKeysLimit, TTL: time.Minute, Wait: time.Minute})
	semKeys, err = measureKeys(ctx, l, names/10, semKeysLimit, permit, func(int64) string { return sem }, "redlockd:*:/"+sem+"#*")
	return keys, semKeys, err
}

// measureKeys runs n acquire+release cycles with lock, c workers at a time,
// cycle i on the resource res(i), then counts the keys that match pattern on
// node 0 and their TTLs (SCAN, and PTTL of each, pipelined).
func measureKeys(ctx context.Context, l *lab, n, c int, lock locker, res func(i int64) string, pattern string) (*keysFigures, error) {
	defer l.closeConns()
	rdb := redis.NewClient(&redis.Options{Addr: l.nodes[0]})
	defer rdb.Close()
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	f := &keysFigures{cycles: n}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				unlock, err := lock(ctx, res(i))
				if err == nil {
					err = unlock(ctx)
				}
				if err != nil {
					mu.Lock()
					f.errors, f.lastErr = f.errors+1, err.Error()
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	f.keys = len(keys)
	for i := 0; i < len(keys); i += 1000 {
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys[i:min(i+1000, len(keys))] {
				p.PTTL(ctx, k)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, cmd := range cmds {
			switch ttl := cmd.(*redis.DurationCmd).Val(); {
			case ttl == -1: // no TTL (-2: gone since the SCAN)
				f.forever++
			case ttl > 0:
				f.longest = max(f.longest, ttl)
			}
		}
	}
	after, err := usedMemory(ctx, rdb)
	f.bytes = after - before
	return f, err
}

// usedMemory reads used_memory from INFO memory (go-redis's InfoMap, as
// idleCommands reads INFO stats).
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info := rdb.InfoMap(ctx, "memory")
	n, err := strconv.ParseInt(info.Item("Memory", "used_memory"), 10, 64)
	return n, cmp.Or(info.Err(), err)
}
