-- acquire.lua: takes the lock on this node if it is free or already held by the same token.
-- KEYS: [lock, meta, fence, waiting]  ARGV: [token, ttl_ms, owner, interest]
-- interest: 1 = the caller waits if refused, 2 = others wait behind the caller. Then the
-- 'waiting' key asks release.lua to announce the lock's release; it lives as long as the lock
-- (plus a second), and a waiter that is refused again renews it.
-- => {1, fence, 0, 0}: newly set; fence is this node's incremented counter, recorded beside the
--                      lock as the node's tentative fence 'nf' (commit.lua records the fence the
--                      coordinator chose as 'fence' when the nodes disagree or some did not answer)
--    {1, fence, 1, c, counter}: already held by token, TTL reset; fence is the one recorded
--                      beside the lock: c = 1 the chosen one ('fence'), c = 0 this node's
--                      tentative one ('nf'); counter is this node's fence counter, from which
--                      the coordinator makes a new fence when the token no longer holds a
--                      quorum (the re-acquire is then a new acquisition)
--    {0, pttl}:        held by another token, pttl its remaining TTL in ms
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  if ARGV[4] == '2' then
    redis.call('SET', KEYS[4], '1', 'PX', tonumber(ARGV[2]) + 1000)
  end
end
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local f = redis.call('INCR', KEYS[3])
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'owner', ARGV[3], 'nf', f)
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, f, 0, 0}
elseif v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('HSET', KEYS[2], 'owner', ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  local m = redis.call('HMGET', KEYS[2], 'fence', 'nf')
  local counter = tonumber(redis.call('GET', KEYS[3]) or '0')
  if m[1] then
    return {1, tonumber(m[1]), 1, 1, counter}
  elseif m[2] then
    return {1, tonumber(m[2]), 1, 0, counter}
  end
  local f = redis.call('INCR', KEYS[3])
  redis.call('HSET', KEYS[2], 'nf', f)
  return {1, f, 0, 0}
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[4], '1', 'PX', math.max(pttl, 1) + 1000)
end
return {0, pttl}
