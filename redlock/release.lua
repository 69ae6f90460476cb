-- release.lua: compare-and-delete, announcing the release to waiters.
-- KEYS: [lock, meta, waiting]  ARGV: [token, channel]
-- => 1 deleted (token held it), 0 no lock here, -1 held by another token
-- On delete, if someone waits for the lock (the 'waiting' key set by acquire.lua), it publishes
-- "<lock key>|<first 16 hex of sha1(token)>" on the channel, so that waiting acquires wake at
-- once and a waiter can ignore its own releases. Nobody waiting: no message.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('PUBLISH', ARGV[2], KEYS[1] .. '|' .. string.sub(redis.sha1hex(ARGV[1]), 1, 16))
  end
  return 1
elseif v == false then
  return 0
end
return -1
