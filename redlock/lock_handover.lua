-- lock_handover.lua: releases a writer's lock and, on this node, gives it at once to a waiting
-- writer of the same gateway (see Coordinator.handOver), as permit_handover.lua does a permit:
-- release.lua's release then acquire.lua's grant of the free lock, with nothing in between, so
-- the lock is never free while the waiter waits and its release is not announced. Only while
-- no waiter of another gateway marked the record (see rec_mark): those compete for each
-- release, which is then release.lua's, announced, and the waiter here competes with them.
-- KEYS: [lock, readers, rmeta, fence, wwait]
-- ARGV: [releasing token, channel, keep_ms, fp (release.lua's ARGV), waiting token, its
-- fingerprint, ttl_ms, owner, idle_ms, floor (see fence.lua), interest, wait_ms, mark] (the
-- waiter's, as acquire.lua's, from ttl_ms on; permit_handover.lua's ARGV too)
-- => {0, 1, {1, fence, 0, 0}}        handed over: the waiter's grant, as acquire.lua's
--    {0, release.lua's reply, {0, -1}} released as release.lua does, nothing granted: the
--                                    releasing token is not the writer here, or waiters of
--                                    another gateway marked the lock
local fencekey, wwait = KEYS[4], KEYS[5]
KEYS[4], KEYS[5] = nil, nil -- release.lua's KEYS are the first three
local r = rec_read(redis.call('GET', KEYS[1]))
if not (r and r.holder == ARGV[1]) or rec_mark(r.flags, ARGV[13]) ~= ARGV[13] then
  local function body()
-- BODY: release.lua
  end
  return {0, body(), {0, -1}}
end
local flags = r.flags
if ARGV[11] == '2' then
  flags = ARGV[13] -- others wait behind the waiter here
end
if tonumber(ARGV[12]) > 0 then
  redis.call('ZREM', wwait, ARGV[5])
end
rec_remember(r, ARGV[4])
return {0, 1, {1, lock_grant(KEYS[1], r, fencekey, ARGV[5], ARGV[7], ARGV[8], ARGV[9], ARGV[10], flags), 0, 0}}
