-- read_acquire.lua: takes a read lock on this node: readers share it, a writer excludes them.
-- KEYS: [lock, meta, fence, waiting, readers, rmeta, wwait]  ARGV: [token, ttl_ms, owner, interest]
-- Refused while a writer holds the lock key, or while a writer waits ('wwait', see acquire.lua)
-- and the token is not a reader already (writer preference: no writer starvation). Else the token
-- enters 'readers' (a sorted set: token → expiry in ms of this node's clock), and 'rmeta' (a hash)
-- records '<token>:nf', this node's fence counter (a reader gets the last writer's fence: no
-- INCR), and '<token>:owner'; commit.lua records the chosen fence as '<token>:fence'. Both keys
-- live as long as their longest reader. interest: as acquire.lua's.
-- => acquire.lua's replies: {1, fence, 0, 0} new, {1, fence, 1, c, counter} already a reader,
--    {0, pttl} refused (pttl: the writer's remaining TTL, or the waiting writers')
local now = now_ms()
local pttl = redis.call('PTTL', KEYS[1])
for _, tok in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)) do
  record_forget(KEYS[6], tok .. ':') -- expired readers
end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local mine = redis.call('ZSCORE', KEYS[5], ARGV[1])
if pttl == -2 and not mine then
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now)
  local last = last_expiry(KEYS[7])
  if last then
    pttl = last - now
  end
end
if pttl ~= -2 then
  if ARGV[4] ~= '0' then
    redis.call('SET', KEYS[4], '1', 'PX', math.max(pttl, 1) + 1000)
  end
  return {0, pttl}
end
if ARGV[4] == '2' then
  redis.call('SET', KEYS[4], '1', 'PX', tonumber(ARGV[2]) + 1000)
end
local tok = ARGV[1]
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), tok)
redis.call('HSET', KEYS[6], tok .. ':owner', ARGV[3])
local keep = math.max(last_expiry(KEYS[5]) - now, 1)
redis.call('PEXPIRE', KEYS[5], keep)
redis.call('PEXPIRE', KEYS[6], keep)
local counter = fence_counter(KEYS[3])
if mine then
  local fence, nf = record_read(KEYS[6], tok .. ':')
  local again = held_again(fence, nf, counter)
  if again then
    return again
  end
else
  redis.call('HDEL', KEYS[6], tok .. ':fence')
end
redis.call('HSET', KEYS[6], tok .. ':nf', string.format('%d', counter))
return {1, counter, 0, 0}
