// Package fencedfloor holds the least a fenced Redlock cycle asks of one
// node: an acquire script that reads the lock key, increments the fence
// counter and sets the key (GET, INCR, SET), and a release script that reads
// the key and leaves a tombstone (GET, SET), with none of the lock's logic
// (a new fence counter lives the lock's TTL, as no key lives forever).
// Fencing makes the acquire a script (its INCR and SET are one step), so no
// fenced lock can cost a node less per cycle. The redlock benchmarks and the
// bench compare the lock's scripts with them (docs/measuring.md, Proposed
// targets).
package fencedfloor

import "github.com/redis/go-redis/v9"

// Acquire and Release take the KEYS and ARGV of the lock's own scripts
// (redlock's acquire.lua and release.lua), and use the first ones only.

// Acquire uses KEYS [lock, fence] and ARGV [token, ttl_ms].
var Acquire = redis.NewScript(`local v = redis.call('GET', KEYS[1])
local f = redis.call('INCR', KEYS[2])
if f == 1 then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. f, 'PX', ARGV[2])
return {1, f, 0, 0}`)

// Release uses KEYS [lock] and ARGV [token, channel (unused), keep_ms].
var Release = redis.NewScript(`local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '~ ' .. ARGV[1], 'PX', ARGV[3])
return 1`)
