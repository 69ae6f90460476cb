-- permit_acquire.lua: acquire.lua on one permit of a semaphore (see permit.go). The lock
-- script below runs as body() on the permit this prelude picks: the one the token holds here
-- already (an idempotent re-acquire), else ARGV's preferred permit. The index of the permits
-- (permits.lua) tells, without looking through the limit's permits, which one the token holds,
-- how many are held, which expires first, and which is free.
-- KEYS: [lock prefix, fence, readers, rmeta, wwait, waiting, limit, permits, holders] (permit
-- i's lock key: prefix .. i; a semaphore has no readers, and waits with wait_ms 0: no 'wwait')
-- A waiter waits for any permit: 'waiting', the semaphore's, is set while someone waits for one
-- (as long as the permit that refused it, plus a second; by the granted caller with interest 2,
-- as long as its TTL plus a second), and every permit's release is then announced.
-- ARGV: acquire.lua's, then [preferred permit, limit]
-- => {permit, acquire.lua's reply, free} (and, granted, full)
--    Granted ({1, ...}): permit is the one granted, free is {}, and full is 1 when every permit
--    is held here once granted, else 0 (the coordinator's next waiter then waits for a release
--    instead of a round that would only be refused: see waitHub.tookPermit).
--    Refused ({0, pttl}) with fewer than limit permits held here: free is {f}, the first permit
--    free here after the preferred one (cyclically), which the coordinator may ask for next.
--    Refused with every permit held: free is {}, permit is the one that expires first, and pttl
--    its remaining TTL. A token that holds none of them and will not wait (interest 0) is
--    refused from the index alone: the lock script, which would refuse it too, does not run.
--    {-1, {-2, limit}, {}}: this node's permits are held with another limit; nothing changed.
-- INCLUDE permits.lua
local want = tonumber(table.remove(ARGV))
local prefer = tonumber(table.remove(ARGV))
local first, pttl = soonest()
local held = 0 -- none when none expires first
if first then
  held = redis.call('ZCOUNT', permitskey, '-inf', '+inf')
end
local stored = tonumber(redis.call('GET', limitkey) or '0')
if held > 0 and stored > 0 and stored ~= want then
  return {-1, {-2, stored}, {}}
end
local permit = -1 -- with none held here, the token holds none (record replaces a stale entry)
if first then
  permit = mine(ARGV[1])
end
if permit < 0 and held >= want and ARGV[4] == '0' then
  -- every permit is held by others, and nobody will wait: refused as the lock script would
  return {first, {0, pttl}, {}}
end
local taken = held -- held here once granted
if permit < 0 then
  permit = prefer
  taken = held + 1
end
KEYS[1] = lockp .. permit
local function body()
-- BODY: acquire.lua
end
local r = body()
if ARGV[4] == '2' and r[1] == 1 then
  redis.call('SET', KEYS[6], '1', 'PX', tonumber(ARGV[2]) + 1000)
elseif ARGV[4] ~= '0' and r[1] == 0 then
  redis.call('SET', KEYS[6], '1', 'PX', math.max(r[2], 1) + 1000)
end
if r[1] == 1 then
  if stored ~= want then
    redis.call('SET', limitkey, want, 'KEEPTTL')
  end
  record(permit, ARGV[1], now_ms(), tonumber(ARGV[2]), first == nil) -- none held here: it is alone
  return {permit, r, {}, taken >= want and 1 or 0}
end
if held < want then
  local f = firstFree(permit + 1, want)
  if f < 0 then
    f = firstFree(0, permit)
  end
  if f >= 0 then
    return {permit, r, {f}}
  end
end
if first then -- every permit is held: report the one that expires first
  return {first, {0, pttl}, {}}
end
return {permit, r, {}}
