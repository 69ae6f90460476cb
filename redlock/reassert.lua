-- reassert.lua: puts back a lock that vanished from this node (a restarted node) while the
-- quorum still holds it. Never overwrites another token; a reader (mode 'read') is put back
-- only where no writer holds the lock key, and a writer only where no live reader holds it.
-- KEYS: [lock, fence, readers, rmeta]  ARGV: [token, ttl_ms, fence, owner, mode, idle_ms]
-- The fence counter is raised to the lock's fence (see fence.lua).
-- => 1 token holds the lock here now, -1 held by another token
local r = rec_read(redis.call('GET', KEYS[1]))
local ttl = tonumber(ARGV[2])
local function raise()
  fence_claim(KEYS[2], tonumber(ARGV[3]), ARGV[6], false)
end
local rel, flags = '-', '-'
if r then
  rel, flags = r.rel, r.flags
end
if ARGV[5] == 'read' then
  if rec_writer(r) then
    return -1
  end
  local tok = ARGV[1]
  redis.call('ZADD', KEYS[3], now_ms() + ttl, tok)
  redis.call('HSET', KEYS[4], tok .. ':owner', ARGV[4], tok .. ':fence', ARGV[3])
  keep_at_least(KEYS[3], ttl)
  keep_at_least(KEYS[4], ttl)
  if r and r.holder == '^' then
    keep_at_least(KEYS[1], ttl)
  else
    rec_write(KEYS[1], {holder = '^', nf = '-', fence = '-', flags = flags, rel = rel, owner = ''}, 'PX', ttl)
  end
  raise()
  return 1
end
if rec_writer(r) then
  if r.holder ~= ARGV[1] then
    return -1
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
end
if r and r.holder == '^' and readers_live(KEYS[3]) then
  return -1
end
rec_write(KEYS[1], {holder = ARGV[1], nf = '-', fence = ARGV[3], flags = flags, rel = rel, owner = ARGV[4]}, 'PX', ttl)
raise()
return 1
