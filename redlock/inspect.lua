-- inspect.lua: reads the lock on this node.
-- KEYS: [lock, meta]  ARGV: []
-- => {} free; {token, pttl, fence, owner} held
local v = redis.call('GET', KEYS[1])
if v == false then
  return {}
end
local m = redis.call('HMGET', KEYS[2], 'fence', 'owner')
return {v, redis.call('PTTL', KEYS[1]), tonumber(m[1] or '0'), m[2] or ''}
