-- extend.lua: compare-and-pexpire, of the writer's lock or of a live reader's.
-- KEYS: [lock, meta, readers, rmeta]  ARGV: [token, ttl_ms]
-- => {1, fence, nf, owner} extended: fence is the chosen fence ('' if none was written back),
--                          nf this node's tentative one ('' if none)
--    {1, fence, nf, owner, 'read'} a reader's, extended (its records in 'rmeta')
--    {0} no lock here; {-1} held by another token (a writer, or live readers)
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  local m = redis.call('HMGET', KEYS[2], 'fence', 'nf', 'owner')
  return {1, m[1] or '', m[2] or '', m[3] or ''}
end
local s = redis.call('ZSCORE', KEYS[3], ARGV[1])
if s then
  local tok, ttl = ARGV[1], tonumber(ARGV[2])
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  if tonumber(s) > now then
    redis.call('ZADD', KEYS[3], 'XX', now + ttl, tok)
    for _, k in ipairs({KEYS[3], KEYS[4]}) do
      if redis.call('PTTL', k) < ttl then
        redis.call('PEXPIRE', k, ttl)
      end
    end
    local m = redis.call('HMGET', KEYS[4], tok .. ':fence', tok .. ':nf', tok .. ':owner')
    return {1, m[1] or '', m[2] or '', m[3] or '', 'read'}
  end
end
if v == false then -- held by another token if live readers hold it
  if redis.call('EXISTS', KEYS[3]) == 1 then
    local t = redis.call('TIME')
    if redis.call('ZCOUNT', KEYS[3], '(' .. (t[1] * 1000 + math.floor(t[2] / 1000)), '+inf') > 0 then
      return {-1}
    end
  end
  return {0}
end
return {-1}
