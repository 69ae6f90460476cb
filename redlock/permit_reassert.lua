-- permit_reassert.lua: reassert.lua on a given permit of a semaphore (see semaphore.go): puts
-- back a permit that vanished from this node (a restarted node) while a quorum holds it.
-- KEYS: [lock prefix, meta prefix, fence, limit]  ARGV: reassert.lua's, then [permit, limit]
-- => {permit, reassert.lua's reply, limit}
local limitkey = table.remove(KEYS)
local limit = table.remove(ARGV)
local permit = table.remove(ARGV)
KEYS[1], KEYS[2] = KEYS[1] .. permit, KEYS[2] .. permit
local function body()
-- BODY: reassert.lua
end
local r = body()
if r == 1 then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > redis.call('PTTL', limitkey) then
    redis.call('SET', limitkey, limit, 'PX', pttl)
  end
end
return {tonumber(permit), r, tonumber(limit)}
