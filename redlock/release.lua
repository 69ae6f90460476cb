-- release.lua: compare-and-delete, announcing the release to waiters, leaving a tombstone.
-- KEYS: [lock, meta, waiting, released]  ARGV: [token, channel, keep_ms]
-- => 1 deleted (token held it), 2 token released this lock within the last keep_ms (a retried
--    release), 0 no lock here, -1 held by another token
-- On delete, if someone waits for the lock (the 'waiting' key set by acquire.lua), it publishes
-- "<lock key>|<first 16 hex of sha1(token)>" on the channel, so that waiting acquires wake at
-- once and a waiter can ignore its own releases. Nobody waiting: no message.
-- With keep_ms > 0 a delete records the token in the lock's 'released' set for keep_ms (this
-- node's clock), so that a retried release is told it worked; the set is trimmed on every
-- delete and expires keep_ms after the last one. keep_ms = 0 (undoing a failed acquire) leaves
-- no tombstone.
local v = redis.call('GET', KEYS[1])
local keep = tonumber(ARGV[3])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('PUBLISH', ARGV[2], KEYS[1] .. '|' .. string.sub(redis.sha1hex(ARGV[1]), 1, 16))
  end
  if keep > 0 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
    redis.call('ZADD', KEYS[4], now + keep, ARGV[1])
    redis.call('PEXPIRE', KEYS[4], keep)
  end
  return 1
end
local until_ms = redis.call('ZSCORE', KEYS[4], ARGV[1])
if until_ms then
  local t = redis.call('TIME')
  if tonumber(until_ms) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
    return 2
  end
end
if v == false then
  return 0
end
return -1
