-- extend.lua: compare-and-pexpire.
-- KEYS: [lock, meta]  ARGV: [token, ttl_ms]
-- => {1, fence, owner} extended; {0} no lock here; {-1} held by another token
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  local m = redis.call('HMGET', KEYS[2], 'fence', 'owner')
  return {1, tonumber(m[1] or '0'), m[2] or ''}
elseif v == false then
  return {0}
end
return {-1}
