-- permit_find.lua: a lock script (commit.lua, extend.lua, release.lua) on the permit of a
-- semaphore that the token holds on this node (see permit.go), found in the index of the
-- permits (permits.lua). It runs below as body(), with KEYS[1] and KEYS[2] made the permit's
-- lock and meta keys; if the token holds no permit here, keys of no permit, so the lock script
-- finds none. The index then follows what the lock script did to the permit's lock key: kept
-- (its expiry noted), or deleted (the permit dropped).
-- KEYS: the lock script's, with the lock and meta key prefixes, then [limit, permits, holders]
-- ARGV: the lock script's (ARGV[1] is the token)
-- => {permit (-1: none), the lock script's reply, the semaphore's limit here (0: unknown)}
-- INCLUDE permits.lua
local limit = tonumber(redis.call('GET', limitkey) or '0')
local permit = mine(ARGV[1])
local suffix = permit >= 0 and tostring(permit) or 'none'
KEYS[1], KEYS[2] = lockp .. suffix, metap .. suffix
local function body()
-- BODY
end
local r = body()
if permit >= 0 then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    record(permit, ARGV[1], now_ms())
  else
    drop(permit, ARGV[1])
  end
end
return {permit, r, limit}
