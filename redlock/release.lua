-- release.lua: compare-and-delete, announcing the release to waiters, leaving a tombstone.
-- KEYS: [lock, meta, waiting, released, readers, rmeta]  ARGV: [token, channel, keep_ms]
-- released is the tombstone key of this lock and token (the coordinator names it).
-- => 1 deleted (token held it, as the writer or as a live reader), 2 token released this lock
--    within the last keep_ms (a retried release), 0 no lock here, -1 held by another token (a
--    writer, or live readers)
-- On delete, if someone waits for the lock (the 'waiting' key set by acquire.lua), it publishes
-- "<lock key>|<first 16 hex of sha1(token)>" on the channel, so that waiting acquires wake at
-- once and a waiter can ignore its own releases; a reader's release publishes only when no live
-- reader is left. Nobody waiting: no message.
-- With keep_ms > 0 a delete sets the tombstone for keep_ms, so that a retried release is told it
-- worked; keep_ms = 0 (undoing a failed acquire) leaves none.
local function readersLive(readers)
  if redis.call('EXISTS', readers) == 0 then
    return false
  end
  local t = redis.call('TIME')
  return redis.call('ZCOUNT', readers, '(' .. (t[1] * 1000 + math.floor(t[2] / 1000)), '+inf') > 0
end
local function released(publish)
  if publish and redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('PUBLISH', ARGV[2], KEYS[1] .. '|' .. string.sub(redis.sha1hex(ARGV[1]), 1, 16))
  end
  if ARGV[3] ~= '0' then
    redis.call('SET', KEYS[4], '1', 'PX', ARGV[3])
  end
  return 1
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return released(true)
end
local s = redis.call('ZSCORE', KEYS[5], ARGV[1])
if s then
  local tok = ARGV[1]
  redis.call('ZREM', KEYS[5], tok)
  redis.call('HDEL', KEYS[6], tok .. ':fence', tok .. ':nf', tok .. ':owner')
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  if tonumber(s) > now then
    if redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf') > 0 then
      return released(false)
    end
    redis.call('DEL', KEYS[5], KEYS[6]) -- the last live reader left
    return released(true)
  end
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return 2
end
if v == false and not readersLive(KEYS[5]) then
  return 0
end
return -1
