-- permit_inspect.lua: reads the permits of a semaphore held on this node, from the index of the
-- permits (permits.lua): its work grows with the permits held, not with the limit.
-- KEYS: [lock prefix, meta prefix, limit, permits, holders]  ARGV: []
-- => {limit, {permit, token, pttl, fence, nf, owner}...} (fence: the chosen fence or ''; nf this
--    node's tentative one or '')
-- INCLUDE permits.lua
local out = {tonumber(redis.call('GET', limitkey) or '0')}
for _, i in ipairs(redis.call('ZRANGEBYSCORE', permitskey, '(' .. now_ms(), '+inf')) do
  local v = redis.call('GET', lockp .. i)
  if v then
    local fence, nf, owner = record_read(metap .. i, '', '')
    out[#out + 1] = {tonumber(i), v, redis.call('PTTL', lockp .. i), fence, nf, owner}
  end
end
return out
