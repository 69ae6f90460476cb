-- release.lua: compare-and-delete, announcing the release to waiters, leaving a tombstone.
-- KEYS: [lock, readers, rmeta] (a semaphore's permits add the semaphore's waiting key and the
-- semaphore's last releases: see permit_find.lua)
-- ARGV: [token, channel, keep_ms, fp (the token's fingerprint: see prelude.lua)]
-- => 1 released (token held it, as the writer or as a live reader), 2 token is among the last
--    releases of this lock here (a retried release), 0 no lock here, -1 held by another token (a
--    writer, or live readers)
-- The writer's record becomes a tombstone (rec_tombstone) that remembers the release for keep_ms,
-- while no later release pushes it out; a reader's release is remembered in the readers' marker.
-- A release is announced to waiters (see announce in prelude.lua); a reader's only when no live
-- reader is left. An uncontended release is GET and SET; the last reader's is GET, ZSCORE, TIME,
-- ZCOUNT, DEL of the readers' keys and SET.
local r = rec_read(lock_get(KEYS[1]))
if r == nil then
  return 0
end
if r.holder == ARGV[1] then
  announce(r, KEYS[4], ARGV[2], KEYS[1], ARGV[4])
  rec_tombstone(KEYS[1], r, ARGV[4], ARGV[3])
  return 1
end
if r.holder == '^' then
  local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if s then
    local now = now_ms()
    local live = tonumber(s) > now
    -- the live readers counted here include the token: alone, it is the last live reader
    if live and redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') == 1 then
      redis.call('DEL', KEYS[2], KEYS[3]) -- the last live reader left, with its record
      announce(r, KEYS[4], ARGV[2], KEYS[1], ARGV[4])
      rec_tombstone(KEYS[1], r, ARGV[4], ARGV[3])
      return 1
    end
    redis.call('ZREM', KEYS[2], ARGV[1])
    record_forget(KEYS[3], ARGV[1] .. ':')
    if live then
      if ARGV[3] ~= '0' then -- remembered, as a writer's release is
        rec_remember(r, ARGV[4])
        rec_write(KEYS[1], r, 'KEEPTTL')
      end
      return 1
    end
  end
end
if rec_released(r, ARGV[4]) then
  return 2
end
if r.holder == '~' or (r.holder == '^' and not readers_live(KEYS[2])) then
  return 0
end
return -1
