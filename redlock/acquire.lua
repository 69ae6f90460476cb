-- acquire.lua: takes the lock on this node if it is free or already held by the same token.
-- KEYS: [lock, meta, fence]  ARGV: [token, ttl_ms, owner]
-- => {1, fence, 0}: newly set; fence is this node's incremented counter, recorded beside the lock
--                   (commit.lua overwrites it when the nodes disagree)
--    {1, fence, 1}: already held by token, TTL reset; fence is the one recorded at acquire (0 if none)
--    {0, pttl}:     held by another token, pttl its remaining TTL in ms
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local f = redis.call('INCR', KEYS[3])
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'owner', ARGV[3], 'fence', f)
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, f, 0}
elseif v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('HSET', KEYS[2], 'owner', ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  local f = redis.call('HGET', KEYS[2], 'fence')
  if f then
    return {1, tonumber(f), 1}
  end
  f = redis.call('INCR', KEYS[3])
  redis.call('HSET', KEYS[2], 'fence', f)
  return {1, f, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
