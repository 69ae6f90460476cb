-- inspect.lua: reads the lock on this node.
-- KEYS: [lock, meta, readers, rmeta]  ARGV: []
-- => {} free; {token, pttl, fence, nf, owner} held by a writer (fence: the chosen fence or '';
--    nf: this node's tentative one or ''); held by readers: {'', 0, '', '', ''} followed by
--    token, pttl, fence, nf, owner of each live reader
local v = redis.call('GET', KEYS[1])
if v then
  local m = redis.call('HMGET', KEYS[2], 'fence', 'nf', 'owner')
  return {v, redis.call('PTTL', KEYS[1]), m[1] or '', m[2] or '', m[3] or ''}
end
if redis.call('EXISTS', KEYS[3]) == 0 then
  return {}
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local out = {'', 0, '', '', ''}
local rs = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #rs, 2 do
  local tok = rs[i]
  local m = redis.call('HMGET', KEYS[4], tok .. ':fence', tok .. ':nf', tok .. ':owner')
  out[#out + 1] = tok
  out[#out + 1] = tonumber(rs[i + 1]) - now
  out[#out + 1] = m[1] or ''
  out[#out + 1] = m[2] or ''
  out[#out + 1] = m[3] or ''
end
return out
