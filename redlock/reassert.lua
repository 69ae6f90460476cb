-- reassert.lua: puts back a lock that vanished from this node (a restarted node) while the
-- quorum still holds it. Never overwrites another token.
-- KEYS: [lock, meta, fence]  ARGV: [token, ttl_ms, fence, owner]
-- => 1 token holds the lock here now, -1 held by another token
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'owner', ARGV[4], 'fence', ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  local cur = tonumber(redis.call('GET', KEYS[3]) or '0')
  if cur < tonumber(ARGV[3]) then
    redis.call('SET', KEYS[3], ARGV[3])
  end
  return 1
elseif v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return -1
