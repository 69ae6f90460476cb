-- read_acquire.lua: takes a read lock on this node: readers share it, a writer excludes them.
-- KEYS: [lock, fence, readers, rmeta, wwait]
-- ARGV: acquire.lua's (a reader uses token, ttl_ms, owner, interest and mark)
-- Refused while a writer holds the lock key, or while a writer waits ('wwait', see acquire.lua)
-- and the token is not a reader already (writer preference: no writer starvation). Else the token
-- enters 'readers' (a sorted set: token -> expiry in ms of this node's clock), and 'rmeta' (a hash)
-- records '<token>:nf', this node's fence counter (a reader gets the last writer's fence: no
-- INCR), and '<token>:owner'; commit.lua records the chosen fence as '<token>:fence'. Both keys
-- live as long as their longest reader, and so does the readers' marker in the lock key (a
-- record whose holder is '^', see rec_read), which sends writers to the readers. interest: as
-- acquire.lua's (a refused reader marks the record that refused it, or makes a tombstone that
-- carries the mark when only waiting writers refused it).
-- => acquire.lua's replies: {1, fence, 0, 0} new, {1, fence, 1, c, counter} already a reader,
--    {0, pttl} refused (pttl: the writer's remaining TTL, or the waiting writers')
local r = rec_read(redis.call('GET', KEYS[1]))
local now = now_ms()
local function refused(pttl)
  if ARGV[4] ~= '0' then
    rec_waited(KEYS[1], r, math.max(pttl, 1) + 1000, ARGV[8])
  end
  return {0, pttl}
end
if rec_writer(r) then
  return refused(redis.call('PTTL', KEYS[1]))
end
local mine
if r and r.holder == '^' then
  for _, tok in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
    record_forget(KEYS[4], tok .. ':') -- expired readers
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  mine = redis.call('ZSCORE', KEYS[3], ARGV[1])
end
if not mine then
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  local last = last_expiry(KEYS[5])
  if last then
    return refused(last - now)
  end
end
local tok = ARGV[1]
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), tok)
redis.call('HSET', KEYS[4], tok .. ':owner', ARGV[3])
local keep = math.max(last_expiry(KEYS[3]) - now, 1)
redis.call('PEXPIRE', KEYS[3], keep)
redis.call('PEXPIRE', KEYS[4], keep)
local marker = {holder = '^', nf = '-', fence = '-', flags = '-', rel = '-', owner = ''}
if r then -- a tombstone's, or the marker's: its releases, and its mark
  marker.rel, marker.flags = r.rel, r.flags
end
if ARGV[4] == '2' then
  marker.flags = rec_mark(marker.flags, ARGV[8])
end
rec_write(KEYS[1], marker, 'PX', keep)
local counter = fence_counter(KEYS[2])
if mine then
  local fence, nf = record_read(KEYS[4], tok .. ':')
  local again = held_again(fence, nf, counter)
  if again then
    return again
  end
else
  redis.call('HDEL', KEYS[4], tok .. ':fence')
end
redis.call('HSET', KEYS[4], tok .. ':nf', string.format('%d', counter))
return {1, counter, 0, 0}
