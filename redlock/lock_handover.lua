-- lock_handover.lua: releases a writer's lock and, on this node, gives it at once to a waiting
-- writer of the same gateway (see Coordinator.handOver), as permit_handover.lua does a permit:
-- release.lua's release then acquire.lua's grant of the free lock, with nothing in between, so
-- the lock is never free while the waiter waits and its release is not announced. Only while
-- no waiter of another gateway marked the record (see rec_mark): those compete for each
-- release, which is then release.lua's, announced, and the waiter here competes with them.
-- KEYS: [lock, readers, rmeta, fence, wwait]
-- ARGV: [releasing token, channel, keep_ms, waiting token, ttl_ms, owner, idle_ms, floor
-- (see fence.lua), interest, wait_ms, mark] (the last four: the waiter's, as acquire.lua's)
-- => {0, 1, {1, fence, 0, 0}}        handed over: the waiter's grant, as acquire.lua's
--    {0, release.lua's reply, {0, -1}} released as release.lua does, nothing granted: the
--                                    releasing token is not the writer here, or waiters of
--                                    another gateway marked the lock
local fencekey, wwait = KEYS[4], KEYS[5]
KEYS[4], KEYS[5] = nil, nil -- release.lua's KEYS are the first three
local r = rec_read(redis.call('GET', KEYS[1]))
if not (r and r.holder == ARGV[1]) or rec_mark(r.flags, ARGV[11]) ~= ARGV[11] then
  local function body()
-- BODY: release.lua
  end
  return {0, body(), {0, -1}}
end
local flags = r.flags
if ARGV[9] == '2' then
  flags = ARGV[11] -- others wait behind the waiter here
end
if tonumber(ARGV[10]) > 0 then
  redis.call('ZREM', wwait, ARGV[4])
end
rec_remember(r, ARGV[1])
return {0, 1, {1, lock_grant(KEYS[1], r, fencekey, ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], flags), 0, 0}}
