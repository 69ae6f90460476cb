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
-- The first reader's grant is GET, TIME, a ZRANGE of 'wwait', GET of the fence counter, DEL of
-- the readers' keys, ZADD, HSET, two PEXPIREs and the marker's SET.
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
local marked = r ~= nil and r.holder == '^'
local mine
if marked then
  local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  for _, tok in ipairs(expired) do
    record_forget(KEYS[4], tok .. ':')
  end
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  end
  mine = redis.call('ZSCORE', KEYS[3], ARGV[1])
end
if not mine then
  -- the last waiting writer's expiry: if it has passed, nobody waits (the expired are dropped)
  local last = tonumber(redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')[2])
  if last and last > now then
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
    return refused(last - now)
  elseif last then
    redis.call('DEL', KEYS[5])
  end
end
local tok, ttl = ARGV[1], tonumber(ARGV[2])
local counter = fence_counter(KEYS[2])
if not marked then
  -- No reader holds it here (the marker lives as long as the last of them): the readers' keys
  -- are made anew, with none of an earlier reader's records.
  redis.call('DEL', KEYS[3], KEYS[4])
end
redis.call('ZADD', KEYS[3], now + ttl, tok)
local keep = marked and math.max(last_expiry(KEYS[3]) - now, 1) or ttl -- the last reader's TTL
local again
if mine then
  local fence, nf = record_read(KEYS[4], tok .. ':')
  again = held_again(fence, nf, counter)
elseif marked then
  redis.call('HDEL', KEYS[4], tok .. ':fence')
end
if again then
  redis.call('HSET', KEYS[4], tok .. ':owner', ARGV[3])
else
  redis.call('HSET', KEYS[4], tok .. ':owner', ARGV[3], tok .. ':nf', string.format('%d', counter))
end
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
return again or {1, counter, 0, 0}
