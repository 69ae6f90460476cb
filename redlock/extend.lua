-- extend.lua: compare-and-pexpire.
-- KEYS: [lock, meta]  ARGV: [token, ttl_ms]
-- => {1, fence, nf, owner} extended: fence is the chosen fence ('' if none was written back),
--                          nf this node's tentative one ('' if none)
--    {0} no lock here; {-1} held by another token
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  local m = redis.call('HMGET', KEYS[2], 'fence', 'nf', 'owner')
  return {1, m[1] or '', m[2] or '', m[3] or ''}
elseif v == false then
  return {0}
end
return {-1}
