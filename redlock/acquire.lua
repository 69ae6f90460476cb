-- acquire.lua: takes the lock (a writer's) on this node if it is free or already held by the same
-- token, and no reader holds it (see read_acquire.lua).
-- KEYS: [lock, meta, fence, waiting, readers, rmeta, wwait]
-- ARGV: [token, ttl_ms, owner, interest, wait_ms, idle_ms, floor] (the last two: the fence counter's, see
-- fence.lua)
-- interest: 1 = the caller waits if refused, 2 = others wait behind the caller. Then the
-- 'waiting' key asks release.lua to announce the lock's release; it lives as long as the lock
-- (plus a second), and a waiter that is refused again renews it. A waiting writer refused by
-- readers (wait_ms > 0: what is left of its wait) also enters 'wwait' (a sorted set: token →
-- expiry in ms of this node's clock, at most wait_ms away), which keeps new readers out; its
-- grant leaves it. A writer refused by a writer does not: readers are kept out by the lock key.
-- Only a free lock key pays for the readers: one EXISTS of 'readers' and 'wwait'.
-- => {1, fence, 0, 0}: newly set; fence is this node's next fence (fence.lua), recorded beside the
--                      lock as the node's tentative fence 'nf' (commit.lua records the fence the
--                      coordinator chose as 'fence' when the nodes disagree or some did not answer)
--    {1, fence, 1, c, counter}: already held by token, TTL reset; fence is the one recorded
--                      beside the lock: c = 1 the chosen one ('fence'), c = 0 this node's
--                      tentative one ('nf'); counter is this node's fence counter (or one below
--                      the floor when it has none: see fence.lua), from which
--                      the coordinator makes a new fence when the token no longer holds a
--                      quorum (the re-acquire is then a new acquisition)
--    {0, pttl}:        held by another token, or by readers: pttl the remaining TTL in ms (of
--                      the reader that expires last)
local v = redis.call('GET', KEYS[1])
local now, pttl
if v == false and redis.call('EXISTS', KEYS[5], KEYS[7]) > 0 then
  now = now_ms()
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  pttl = last_expiry(KEYS[5])
  if pttl then
    pttl = pttl - now
  else
    redis.call('DEL', KEYS[6]) -- records of expired readers
    redis.call('ZREM', KEYS[7], ARGV[1])
  end
end
if pttl == nil then
  if (v == false or v == ARGV[1]) and ARGV[4] == '2' then
    redis.call('SET', KEYS[4], '1', 'PX', tonumber(ARGV[2]) + 1000)
  end
  if v == false then
    return {1, lock_grant(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[6], ARGV[7]), 0, 0}
  elseif v == ARGV[1] then
    redis.call('HSET', KEYS[2], 'owner', ARGV[3])
    lock_renew(KEYS[1], KEYS[2], ARGV[2])
    local fence, nf = record_read(KEYS[2], '')
    local again = held_again(fence, nf, fence_peek(KEYS[3], ARGV[7]))
    if again then
      return again
    end
    local f = fence_next(KEYS[3], ARGV[6], ARGV[7])
    redis.call('HSET', KEYS[2], 'nf', string.format('%d', f))
    return {1, f, 0, 0}
  end
  pttl = redis.call('PTTL', KEYS[1])
end
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[4], '1', 'PX', math.max(pttl, 1) + 1000)
  if now ~= nil and tonumber(ARGV[5]) > 0 then -- refused by readers: only their check sets now
    local px = math.min(math.max(pttl, 1) + 1000, tonumber(ARGV[5]))
    redis.call('ZADD', KEYS[7], now + px, ARGV[1])
    keep_at_least(KEYS[7], px)
  end
end
return {0, pttl}
