-- permit_reassert.lua: reassert.lua on a given permit of a semaphore (see permit.go): puts
-- back a permit that vanished from this node (a restarted node) while a quorum holds it, and
-- notes it in the index of the permits (permits.lua). A token that holds another permit here
-- already is not given a second one.
-- KEYS: [lock prefix, fence, readers, rmeta, limit, permits, holders]
-- ARGV: reassert.lua's, then [permit, limit]
-- => {permit, reassert.lua's reply (-1 also when the token holds another permit here), limit}
-- INCLUDE permits.lua
local limit = table.remove(ARGV)
local permit = tonumber(table.remove(ARGV))
local other = mine(ARGV[1])
if other >= 0 and other ~= permit then
  return {permit, -1, tonumber(limit)}
end
KEYS[1] = lockp .. permit
local function body()
-- BODY: reassert.lua
end
local r = body()
if r == 1 then
  if redis.call('GET', limitkey) ~= limit then
    redis.call('SET', limitkey, limit, 'KEEPTTL')
  end
  record(permit, ARGV[1], now_ms())
end
return {permit, r, tonumber(limit)}
