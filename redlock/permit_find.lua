-- permit_find.lua: a lock script (commit.lua, extend.lua, release.lua) on the permit of a
-- semaphore that the token holds on this node (see semaphore.go). It runs below as body(), with
-- KEYS[1] and KEYS[2] made the permit's lock and meta keys; if the token holds no permit here,
-- keys of no permit, so the lock script finds none.
-- KEYS: the lock script's, with the lock and meta key prefixes, then [limit]
-- ARGV: the lock script's (ARGV[1] is the token)
-- => {permit (-1: none), the lock script's reply, the semaphore's limit here (0: unknown)}
local limitkey = table.remove(KEYS)
local limit = tonumber(redis.call('GET', limitkey) or '0')
local permit = -1
for i = 0, limit - 1 do
  if redis.call('GET', KEYS[1] .. i) == ARGV[1] then
    permit = i
    break
  end
end
local suffix = permit >= 0 and tostring(permit) or 'none'
KEYS[1], KEYS[2] = KEYS[1] .. suffix, KEYS[2] .. suffix
local function body()
-- BODY
end
local r = body()
if permit >= 0 then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > redis.call('PTTL', limitkey) then
    redis.call('PEXPIRE', limitkey, pttl)
  end
end
return {permit, r, limit}
