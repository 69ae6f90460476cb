-- reassert.lua: puts back a lock that vanished from this node (a restarted node) while the
-- quorum still holds it. Never overwrites another token; a reader (mode 'read') is put back
-- only where no writer holds the lock key.
-- KEYS: [lock, meta, fence, readers, rmeta]  ARGV: [token, ttl_ms, fence, owner, mode, idle_ms]
-- The fence counter is raised to the lock's fence (see fence.lua).
-- => 1 token holds the lock here now, -1 held by another token
local v = redis.call('GET', KEYS[1])
local function raise()
  fence_claim(KEYS[3], tonumber(ARGV[3]), ARGV[6], false)
end
if ARGV[5] == 'read' then
  if v then
    return -1
  end
  local tok, ttl = ARGV[1], tonumber(ARGV[2])
  redis.call('ZADD', KEYS[4], now_ms() + ttl, tok)
  redis.call('HSET', KEYS[5], tok .. ':owner', ARGV[4], tok .. ':fence', ARGV[3])
  keep_at_least(KEYS[4], ttl)
  keep_at_least(KEYS[5], ttl)
  raise()
  return 1
end
if v == false then
  lock_set(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[4], 'fence', ARGV[3])
  raise()
  return 1
elseif v == ARGV[1] then
  lock_renew(KEYS[1], KEYS[2], ARGV[2])
  return 1
end
return -1
