-- commit.lua: records the fencing token chosen for an acquire.
-- Raises this node's fence counter to at least ARGV[2] (so later acquires that read it get more)
-- and, if the token still holds the lock here, stores the fence beside it.
-- KEYS: [lock, meta, fence]  ARGV: [token, fence]
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
return 0
