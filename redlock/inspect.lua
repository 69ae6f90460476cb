-- inspect.lua: reads the lock on this node.
-- KEYS: [lock, meta, readers, rmeta]  ARGV: []
-- => {} free; {token, pttl, fence, nf, owner} held by a writer (fence: the chosen fence or '';
--    nf: this node's tentative one or ''); held by readers: {'', 0, '', '', ''} followed by
--    token, pttl, fence, nf, owner of each live reader
local v = redis.call('GET', KEYS[1])
if v then
  local fence, nf, owner = record_read(KEYS[2], '', '')
  return {v, redis.call('PTTL', KEYS[1]), fence, nf, owner}
end
if redis.call('EXISTS', KEYS[3]) == 0 then
  return {}
end
local now = now_ms()
local out = {'', 0, '', '', ''}
local rs = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #rs, 2 do
  local tok = rs[i]
  local fence, nf, owner = record_read(KEYS[4], tok .. ':', '')
  for _, x in ipairs({tok, tonumber(rs[i + 1]) - now, fence, nf, owner}) do
    out[#out + 1] = x
  end
end
return out
