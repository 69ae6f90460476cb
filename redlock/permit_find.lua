-- permit_find.lua: a lock script (commit.lua, extend.lua, release.lua) on the permit of a
-- semaphore that the token holds on this node (see permit.go), found in the index of the
-- permits (permits.lua). It runs below as body(), with KEYS[1] made the permit's lock key; if
-- the token holds no permit here, the key of no permit, so the lock script finds none. The index
-- then follows what the lock script did to the permit: kept (its expiry noted), or released (the
-- permit dropped). A released permit leaves the index, so a retried release cannot find it
-- there: release.lua's KEYS of a permit end with the semaphore's waiting key and its releases,
-- where the token's release is remembered for keep_ms (remember: a retry then answers 2).
-- KEYS: the lock script's, with the lock key prefix, then [limit, permits, holders]
-- ARGV: the lock script's (ARGV[1] is the token; a release's ARGV[4] its fingerprint)
-- => {permit (-1: none), the lock script's reply, the semaphore's limit here (0: unknown)}
-- INCLUDE permits.lua
local limit = tonumber(redis.call('GET', limitkey) or '0')
local releases = KEYS[5] -- a release's (see above)
local permit
if releases then
  -- the permit the index names, its record read once, by release.lua (see below)
  permit = tonumber(redis.call('ZSCORE', holderskey, ARGV[1]) or -1)
else
  permit = mine(ARGV[1])
end
if permit < 0 and releases and released(releases, ARGV[4]) then
  return {permit, 2, limit}
end
local suffix = permit >= 0 and tostring(permit) or 'none'
KEYS[1] = lockp .. suffix
local function body()
-- BODY
end
local r = body()
if releases and permit >= 0 and r ~= 1 then
  -- The permit's record does not name the token: its entry in the index is dropped, as mine
  -- drops it, and the release answered as one that finds no permit here.
  redis.call('ZREM', holderskey, ARGV[1])
  return {-1, released(releases, ARGV[4]) and 2 or 0, limit}
end
if permit >= 0 then
  if not releases then
    -- commit.lua and extend.lua keep the holder that mine found: the permit's expiry is noted
    note(permit, now_ms())
  else -- released (1: see above)
    drop(permit, ARGV[1])
    if ARGV[3] ~= '0' then
      remember(releases, ARGV[4], ARGV[3], limit)
    end
  end
end
return {permit, r, limit}
