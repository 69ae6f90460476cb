package main

import (
	"cmp"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/client"
)

// keysFigures is what the keys group measured: acquire+release cycles on
// names used once each (a tenant touching ever new names), and what they
// left on node 0.
type keysFigures struct {
	names, errors int
	lastErr       string
	keys          int           // keys of those names on node 0
	forever       int           // of them, keys without a TTL
	longest       time.Duration // the longest TTL among them
	bytes         int64         // used_memory's growth on node 0
}

// measureKeys runs one acquire+release cycle on each of n distinct names
// with c workers, then counts the keys of those names on node 0 and their
// TTLs (SCAN, and PTTL of each, pipelined).
func measureKeys(ctx context.Context, l *lab, prefix string, n, c int) (*keysFigures, error) {
	defer l.closeConns()
	rdb := redis.NewClient(&redis.Options{Addr: l.nodes[0]})
	defer rdb.Close()
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	f := &keysFigures{names: n}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				res := prefix + strconv.FormatInt(i, 10)
				lock, err := l.client.Acquire(ctx, res, client.AcquireOptions{TTL: time.Minute})
				if err == nil {
					err = l.client.Release(ctx, res, lock.Token)
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
	iter := rdb.Scan(ctx, 0, "redlockd:*:/"+prefix+"*", 1000).Iterator()
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
