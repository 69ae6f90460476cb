-- multi_acquire.lua: acquire.lua on several resources at once, all or nothing (AcquireMulti).
-- KEYS: acquire.lua's 5 keys of each resource, one resource after the other
-- ARGV: acquire.lua's
-- Phase 1 checks every resource as acquire.lua decides: refused when its lock key holds another
-- token, or when it is free and a live reader holds it. If any is refused, acquire.lua runs on
-- the refused ones only (it refuses again, and writes only their waiting marks and 'wwait', so
-- that their release is announced to this waiter) and nothing else is written. Else phase 2 runs
-- acquire.lua on every resource, and each grants (nothing the checks saw can come back within a
-- script). The body below is acquire.lua, run as a function on the KEYS of resource i.
-- => {1, reply_1, …, reply_n}: reply_i is acquire.lua's grant of resource i
--    {0, pttl}: refused; pttl is the longest of the refused resources' remaining TTLs
local all, n = {}, #KEYS / 5
for i, k in ipairs(KEYS) do
  all[i] = k
end
-- read holds the lock keys' values as phase 1 read them, for the body (lock_get, see prelude.lua).
local read = {}
local function lock_get(key)
  return lock_taken(read, key)
end
local function body()
-- BODY: acquire.lua
end
local function on(i)
  for j = 1, 5 do
    KEYS[j] = all[5 * (i - 1) + j]
  end
  return body()
end
local now = now_ms()
local refused = {}
for i = 1, n do
  local v = redis.call('GET', all[5 * i - 4])
  read[all[5 * i - 4]] = v
  local r = rec_read(v)
  if (rec_writer(r) and r.holder ~= ARGV[1]) or (r and r.holder == '^' and readers_live(all[5 * i - 2], now)) then
    refused[#refused + 1] = i
  end
end
if #refused > 0 then
  local pttl = -2
  for _, i in ipairs(refused) do
    local r = on(i)
    if r[1] == 0 then
      pttl = math.max(pttl, r[2])
    else
      -- its last reader expired since the check (TIME moves on): leave it free
      rec_tombstone(all[5 * i - 4], rec_read(redis.call('GET', all[5 * i - 4])), nil, '0')
    end
  end
  return {0, pttl}
end
local out = {1}
for i = 1, n do
  out[i + 1] = on(i)
end
return out
