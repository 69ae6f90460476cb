-- permit_handover.lua: releases the permit of a semaphore that a token holds and, on this node,
-- gives it at once to a waiting token (see Coordinator.handOver): release.lua's delete of the
-- releasing token's lock (its release remembered) then acquire.lua's grant of the free lock to the
-- waiting token, with nothing in between: the permit is never free while someone waits, so its
-- release is not announced. Both tokens' permits are found in the index of the permits
-- (permits.lua).
-- KEYS: [lock prefix, fence, waiting, releases (see remember, permits.lua), limit, permits, holders]
-- ARGV: [releasing token, channel, keep_ms, its fingerprint, waiting token, its fingerprint,
--        ttl_ms, owner, idle_ms, floor (see fence.lua), interest, wait_ms, mark] (from ttl_ms on
--        acquire.lua's: with interest 2 the waiter's permit is marked, so that its release is
--        announced, as a permit granted by a round)
-- => {permit, 1, {1, fence, 0, 0}}  handed over
--    {-1, 2 or 0, {0, -1}}          the releasing token holds no permit here (2: its release is
--                                   remembered, see remember); the coordinator may then put the
--                                   waiter's new permit here (see Coordinator.handOver)
-- A permit the waiting token holds here already is a leftover of its failed rounds (it waits,
-- between rounds, for the release of this one): it is undone first, as the attempt's cleanup
-- would do (not remembered; announced as a release), so that the waiter holds the permit handed
-- over on this node as on the others, and the permit it leaves is free here as elsewhere.
-- INCLUDE permits.lua
local permit = mine(ARGV[1])
if permit < 0 then
  if released(KEYS[4], ARGV[4]) then
    return {-1, 2, {0, -1}}
  end
  return {-1, 0, {0, -1}}
end
local lock = lockp .. permit
local r = rec_read(lock_get(lock)) -- as mine read it
remember(KEYS[4], ARGV[4], ARGV[3], tonumber(redis.call('GET', limitkey)))
local left = mine(ARGV[5])
if left >= 0 then
  local llock = lockp .. left
  local lr = rec_read(lock_get(llock))
  announce(lr, KEYS[3], ARGV[2], llock, ARGV[6])
  rec_tombstone(llock, lr, ARGV[6], '0')
  drop(left, ARGV[5])
end
rec_remember(r, ARGV[4])
local flags = '-'
if ARGV[11] == '2' then
  flags = ARGV[13] -- others wait behind the waiter here
end
local f = lock_grant(lock, r, KEYS[2], ARGV[5], ARGV[7], ARGV[8], ARGV[9], ARGV[10], flags)
record(permit, ARGV[5], now_ms(), tonumber(ARGV[7]))
return {permit, 1, {1, f, 0, 0}}
