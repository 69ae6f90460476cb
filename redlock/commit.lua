-- commit.lua: records the fencing token chosen for an acquire, as this node's claim of it.
-- KEYS: [lock, fence, readers, rmeta]  ARGV: [token, fence, idle_ms, claim]
-- claim = 1 (a writer's or a permit's fence, which is one holder's): the fence is this token's here
-- only if this node's counter is below it (it is raised: no later acquire here gets it) or this
-- node handed it to the token (its tentative 'nf', or the 'fence' already recorded beside it);
-- each node gives each value to at most one token, so no two holders get one fence from a quorum
-- (see fence.lua). claim = 0 (a reader's, the last writer's fence, shared by readers): the
-- counter is raised to it, and it is recorded.
-- Recorded (when the token still holds the lock here): as 'fence' in the writer's record, or as
-- '<token>:fence' in 'rmeta' for a live reader (see read_acquire.lua).
-- => {1, counter} the token holds the lock here and the fence is recorded as its
--    {0, counter} the token does not hold the lock here
--    {-1, counter} the token holds the lock here, but this node gave the fence to another token
--    (counter: this node's fence counter, after the commit)
local f = tonumber(ARGV[2])
local r = rec_read(lock_get(KEYS[1]))
if r and r.holder == ARGV[1] then
  local mine = rec_num(r.fence) == f or rec_num(r.nf) == f
  if not fence_claim(KEYS[2], f, ARGV[3], mine or ARGV[4] == '0') then
    return {-1, fence_counter(KEYS[2])}
  end
  r.fence = ARGV[2]
  rec_write(KEYS[1], r, 'KEEPTTL')
  return {1, fence_counter(KEYS[2])}
end
fence_claim(KEYS[2], f, ARGV[3], false)
if r and r.holder == '^' then
  local s = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if s and tonumber(s) > now_ms() then
    redis.call('HSET', KEYS[4], ARGV[1] .. ':fence', ARGV[2])
    if redis.call('PTTL', KEYS[4]) < 0 then -- made anew: as long as the readers
      redis.call('PEXPIRE', KEYS[4], math.max(redis.call('PTTL', KEYS[3]), 1))
    end
    return {1, fence_counter(KEYS[2])}
  end
end
return {0, fence_counter(KEYS[2])}
