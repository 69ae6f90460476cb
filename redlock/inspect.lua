-- inspect.lua: reads the lock on this node.
-- KEYS: [lock, meta]  ARGV: []
-- => {} free; {token, pttl, fence, nf, owner} held (fence: the chosen fence or ''; nf: this
--    node's tentative one or '')
local v = redis.call('GET', KEYS[1])
if v == false then
  return {}
end
local m = redis.call('HMGET', KEYS[2], 'fence', 'nf', 'owner')
return {v, redis.call('PTTL', KEYS[1]), m[1] or '', m[2] or '', m[3] or ''}
