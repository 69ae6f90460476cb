-- extend.lua: compare-and-pexpire, of the writer's lock or of a live reader's.
-- KEYS: [lock, readers, rmeta]  ARGV: [token, ttl_ms]
-- => {1, fence, nf, owner} extended: fence is the chosen fence ('' if none was written back),
--                          nf this node's tentative one ('' if none)
--    {1, fence, nf, owner, 'read'} a reader's, extended (its records in 'rmeta', and the
--                          readers' marker kept as long as it)
--    {0} no lock here; {-1} held by another token (a writer, or live readers)
local r = rec_read(lock_get(KEYS[1]))
if r and r.holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, rec_shown(r.fence), rec_shown(r.nf), r.owner}
end
if r and r.holder == '^' then
  local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
  local now = now_ms()
  if s and tonumber(s) > now then
    local tok, ttl = ARGV[1], tonumber(ARGV[2])
    redis.call('ZADD', KEYS[2], 'XX', now + ttl, tok)
    keep_at_least(KEYS[1], ttl)
    keep_at_least(KEYS[2], ttl)
    keep_at_least(KEYS[3], ttl)
    local fence, nf, owner = record_read(KEYS[3], tok .. ':', '')
    return {1, fence, nf, owner, 'read'}
  end
  if readers_live(KEYS[2], now) then
    return {-1}
  end
  return {0}
end
if rec_writer(r) then
  return {-1}
end
return {0}
