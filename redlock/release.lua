-- release.lua: compare-and-delete, announcing the release to waiters, leaving a tombstone.
-- KEYS: [lock, meta, waiting, released, readers, rmeta]  ARGV: [token, channel, keep_ms]
-- released is the tombstone key of this lock and token (the coordinator names it).
-- => 1 deleted (token held it, as the writer or as a live reader), 2 token released this lock
--    within the last keep_ms (a retried release), 0 no lock here, -1 held by another token (a
--    writer, or live readers)
-- A delete is announced to waiters (see announce in prelude.lua); a reader's release only when no
-- live reader is left. With keep_ms > 0 it leaves the tombstone for keep_ms (see tombstone).
local function released(publish)
  if publish then
    announce(KEYS[3], ARGV[2], KEYS[1], ARGV[1])
  end
  tombstone(KEYS[4], ARGV[3])
  return 1
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return released(true)
end
local s = redis.call('ZSCORE', KEYS[5], ARGV[1])
if s then
  redis.call('ZREM', KEYS[5], ARGV[1])
  record_forget(KEYS[6], ARGV[1] .. ':')
  local now = now_ms()
  if tonumber(s) > now then
    if readers_live(KEYS[5], now) then
      return released(false)
    end
    redis.call('DEL', KEYS[5], KEYS[6]) -- the last live reader left
    return released(true)
  end
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return 2
end
if v == false and not readers_live(KEYS[5]) then
  return 0
end
return -1
