-- permit_inspect.lua: reads the permits of a semaphore held on this node.
-- KEYS: [lock prefix, meta prefix, limit]  ARGV: []
-- => {limit, {permit, token, pttl, fence, nf, owner}...} (fence: the chosen fence or ''; nf this
--    node's tentative one or '')
local limit = tonumber(redis.call('GET', KEYS[3]) or '0')
local out = {limit}
for i = 0, limit - 1 do
  local v = redis.call('GET', KEYS[1] .. i)
  if v then
    local m = redis.call('HMGET', KEYS[2] .. i, 'fence', 'nf', 'owner')
    out[#out + 1] = {i, v, redis.call('PTTL', KEYS[1] .. i), m[1] or '', m[2] or '', m[3] or ''}
  end
end
return out
