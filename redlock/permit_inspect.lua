-- permit_inspect.lua: reads the permits of a semaphore held on this node, from the index of the
-- permits (permits.lua): its work grows with the permits held, not with the limit.
-- KEYS: [lock prefix, limit, permits, holders]  ARGV: []
-- => {limit, {permit, token, pttl, fence, nf, owner}...} (fence: the chosen fence or ''; nf this
--    node's tentative one or '')
-- INCLUDE permits.lua
local out = {tonumber(redis.call('GET', limitkey) or '0')}
for _, i in ipairs(redis.call('ZRANGEBYSCORE', permitskey, '(' .. now_ms(), '+inf')) do
  local r = rec_read(redis.call('GET', lockp .. i))
  if rec_writer(r) then
    out[#out + 1] = {tonumber(i), r.holder, redis.call('PTTL', lockp .. i), rec_shown(r.fence), rec_shown(r.nf), r.owner}
  end
end
return out
