-- commit.lua: records the fencing token chosen for an acquire.
-- Raises this node's fence counter to at least ARGV[2] (so later acquires that read it get more)
-- and, if the token still holds the lock here, stores the fence beside it: as 'fence' in the
-- writer's meta, or as '<token>:fence' in 'rmeta' for a live reader (see read_acquire.lua).
-- KEYS: [lock, meta, fence, readers, rmeta]  ARGV: [token, fence]
-- => 1 if token holds the lock here, 0 otherwise
local cur = tonumber(redis.call('GET', KEYS[3]) or '0')
if cur < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[3], ARGV[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('HSET', KEYS[2], 'fence', ARGV[2])
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    redis.call('PEXPIRE', KEYS[2], pttl)
  end
  return 1
end
local s = redis.call('ZSCORE', KEYS[4], ARGV[1])
if s then
  local t = redis.call('TIME')
  if tonumber(s) > t[1] * 1000 + math.floor(t[2] / 1000) then
    redis.call('HSET', KEYS[5], ARGV[1] .. ':fence', ARGV[2])
    return 1
  end
end
return 0
