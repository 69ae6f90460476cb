-- permit_acquire.lua: acquire.lua on one permit of a semaphore (see semaphore.go). The lock
-- script below runs as body() on the permit this prelude picks: the one the token holds here
-- already (an idempotent re-acquire), else ARGV's preferred permit.
-- KEYS: [lock prefix, meta prefix, fence, waiting, readers, rmeta, wwait, limit]  (permit i's
-- keys: prefix .. i; a semaphore has no readers, and waits with wait_ms 0: no 'wwait')
-- ARGV: acquire.lua's, then [preferred permit, limit]
-- => {permit, acquire.lua's reply, free}: free lists the permits free here (below the limit).
--    Refused ({0, pttl}): permit is the held permit that expires first, pttl its remaining TTL.
--    {-1, {-2, limit}, {}}: this node's permits are held with another limit; nothing changed.
local limitkey = table.remove(KEYS)
local want = tonumber(table.remove(ARGV))
local prefer = tonumber(table.remove(ARGV))
local stored = tonumber(redis.call('GET', limitkey) or '0')
local lb, mb = KEYS[1], KEYS[2]
local permit, held, free = -1, false, {}
for i = 0, math.max(want, stored) - 1 do
  local v = redis.call('GET', lb .. i)
  if v == ARGV[1] then
    permit = i
  elseif v then
    held = true
  elseif i < want then
    free[#free + 1] = i
  end
end
if stored > 0 and stored ~= want and (held or permit >= 0) then
  return {-1, {-2, stored}, {}}
end
if permit < 0 then
  permit = prefer
end
KEYS[1], KEYS[2] = lb .. permit, mb .. permit
local function body()
-- BODY: acquire.lua
end
local r = body()
if r[1] == 1 then
  local pttl = redis.call('PTTL', limitkey)
  redis.call('SET', limitkey, want, 'PX', math.max(pttl, tonumber(ARGV[2])))
elseif #free == 0 then
  -- every permit is held: report the one that expires first
  for i = 0, want - 1 do
    local t = redis.call('PTTL', lb .. i)
    if t >= 0 and t < r[2] then
      permit, r[2] = i, t
    end
  end
end
return {permit, r, free}
