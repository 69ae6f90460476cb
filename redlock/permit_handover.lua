-- permit_handover.lua: releases the permit of a semaphore that a token holds and, on this node,
-- gives it at once to a waiting token (see Coordinator.handOver), as release.lua then
-- acquire.lua would, with nothing in between: the permit is never free while someone waits.
-- Both tokens' permits are found in the index of the permits (permits.lua).
-- KEYS: [lock prefix, meta prefix, fence, waiting, tombstone of the releasing token, limit,
-- permits, holders]
-- ARGV: [releasing token, channel, keep_ms, waiting token, ttl_ms, owner, idle_ms, floor (see fence.lua)]
-- => {permit, 1, {1, fence, 0, 0}}  handed over
--    {permit, 1, {0, -1}}           released only: the waiting token holds a permit here already
--                                   (left by one of its failed rounds), so it gets none
--    {-1, 2 or 0, {0, -1}}          the releasing token holds no permit here (2: it released one
--                                   within keep_ms)
-- INCLUDE permits.lua
local permit = mine(ARGV[1])
if permit < 0 then
  if redis.call('EXISTS', KEYS[5]) == 1 then
    return {-1, 2, {0, -1}}
  end
  return {-1, 0, {0, -1}}
end
local waiter = mine(ARGV[4]) >= 0
local lock, meta = lockp .. permit, metap .. permit
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[3])
end
redis.call('DEL', meta)
if waiter then
  redis.call('DEL', lock)
  drop(permit, ARGV[1])
  if redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('PUBLISH', ARGV[2], lock .. '|' .. string.sub(redis.sha1hex(ARGV[1]), 1, 16))
  end
  return {permit, 1, {0, -1}}
end
redis.call('SET', lock, ARGV[4], 'PX', ARGV[5])
local f = fence_next(KEYS[3], ARGV[7], ARGV[8])
redis.call('HSET', meta, 'owner', ARGV[6], 'nf', string.format('%d', f))
redis.call('PEXPIRE', meta, ARGV[5])
record(permit, ARGV[4], now_ms())
return {permit, 1, {1, f, 0, 0}}
