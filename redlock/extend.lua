-- extend.lua: compare-and-pexpire, of the writer's lock or of a live reader's.
-- KEYS: [lock, meta, readers, rmeta]  ARGV: [token, ttl_ms]
-- => {1, fence, nf, owner} extended: fence is the chosen fence ('' if none was written back),
--                          nf this node's tentative one ('' if none)
--    {1, fence, nf, owner, 'read'} a reader's, extended (its records in 'rmeta')
--    {0} no lock here; {-1} held by another token (a writer, or live readers)
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  lock_renew(KEYS[1], KEYS[2], ARGV[2])
  return {1, record_read(KEYS[2], '', '')}
end
local s = redis.call('ZSCORE', KEYS[3], ARGV[1])
if s then
  local tok, ttl = ARGV[1], tonumber(ARGV[2])
  local now = now_ms()
  if tonumber(s) > now then
    redis.call('ZADD', KEYS[3], 'XX', now + ttl, tok)
    keep_at_least(KEYS[3], ttl)
    keep_at_least(KEYS[4], ttl)
    local fence, nf, owner = record_read(KEYS[4], tok .. ':', '')
    return {1, fence, nf, owner, 'read'}
  end
end
if v == false and not readers_live(KEYS[3]) then
  return {0}
end
return {-1} -- a writer's, or live readers'
