-- inspect.lua: reads the lock on this node.
-- KEYS: [lock, readers, rmeta]  ARGV: []
-- => {} free; {token, pttl, fence, nf, owner} held by a writer (fence: the chosen fence or '';
--    nf: this node's tentative one or ''); held by readers: {'', 0, '', '', ''} followed by
--    token, pttl, fence, nf, owner of each live reader
local r = rec_read(redis.call('GET', KEYS[1]))
if rec_writer(r) then
  return {r.holder, redis.call('PTTL', KEYS[1]), rec_shown(r.fence), rec_shown(r.nf), r.owner}
end
if r == nil or r.holder ~= '^' then
  return {}
end
local now = now_ms()
local out = {'', 0, '', '', ''}
local rs = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES')
if #rs == 0 then
  return {}
end
for i = 1, #rs, 2 do
  local tok = rs[i]
  local fence, nf, owner = record_read(KEYS[3], tok .. ':', '')
  for _, x in ipairs({tok, tonumber(rs[i + 1]) - now, fence, nf, owner}) do
    out[#out + 1] = x
  end
end
return out
