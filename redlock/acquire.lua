-- acquire.lua: takes the lock (a writer's) on this node if it is free or already held by the same
-- token, and no reader holds it (see read_acquire.lua).
-- KEYS: [lock, fence, readers, rmeta, wwait] (a semaphore's permits add the semaphore's waiting
-- key: see permit_acquire.lua)
-- ARGV: [token, ttl_ms, owner, interest, wait_ms, idle_ms, floor, mark] (idle_ms and floor: the
-- fence counter's, see fence.lua; mark: the gateway's waiting mark, see rec_mark)
-- interest: 1 = the caller waits if refused, 2 = others wait behind the caller. Then the lock's
-- record is marked (see rec_waited), so that its release is announced: by the refused caller on
-- the record that refused it, by the granted one (2) on its own; a grant keeps the marks of
-- the record it replaces. A waiting writer refused by
-- readers (wait_ms > 0: what is left of its wait) also enters 'wwait' (a sorted set: token ->
-- expiry in ms of this node's clock, at most wait_ms away), which keeps new readers out; its
-- grant leaves it. A writer refused by a writer does not: readers are kept out by the lock key.
-- Only a readers' marker in the lock key (see read_acquire.lua) sends a writer to the readers.
-- An uncontended grant is GET, INCR and SET (a waiting writer's adds a ZREM of wwait).
-- => {1, fence, 0, 0}: newly set; fence is this node's next fence (fence.lua), recorded in the
--                      record as the node's tentative fence 'nf' (commit.lua records the fence
--                      the coordinator chose as 'fence' when the nodes disagree or some did not
--                      answer)
--    {1, fence, 1, c, counter}: already held by token, TTL reset; fence is the one recorded
--                      in the record: c = 1 the chosen one ('fence'), c = 0 this node's
--                      tentative one ('nf'); counter is this node's fence counter (or one below
--                      the floor when it has none: see fence.lua), from which
--                      the coordinator makes a new fence when the token no longer holds a
--                      quorum (the re-acquire is then a new acquisition)
--    {0, pttl}:        held by another token, or by readers: pttl the remaining TTL in ms (of
--                      the reader that expires last)
local r = rec_read(lock_get(KEYS[1]))
local flags = '-'
if ARGV[4] == '2' then
  flags = ARGV[8]
end
if r and not rec_writer(r) then
  flags = rec_mark(r.flags, flags) -- who waited on the record it replaces
end
local now, pttl
if r and r.holder == '^' then
  now = now_ms()
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  pttl = last_expiry(KEYS[3])
  if pttl then
    pttl = pttl - now
  else
    redis.call('DEL', KEYS[4]) -- records of expired readers
  end
end
if pttl == nil then
  if not rec_writer(r) then
    if tonumber(ARGV[5]) > 0 then
      redis.call('ZREM', KEYS[5], ARGV[1])
    end
    return {1, lock_grant(KEYS[1], r, KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[6], ARGV[7], flags), 0, 0}
  elseif r.holder == ARGV[1] then
    local again = held_again(rec_num(r.fence), rec_num(r.nf), fence_peek(KEYS[2], ARGV[7]))
    local f
    if not again then
      f = fence_next(KEYS[2], ARGV[6], ARGV[7])
      r.nf = string.format('%d', f)
    end
    r.owner = ARGV[3]
    r.flags = rec_mark(r.flags, flags)
    rec_write(KEYS[1], r, 'PX', ARGV[2])
    return again or {1, f, 0, 0}
  end
  pttl = redis.call('PTTL', KEYS[1])
end
if ARGV[4] ~= '0' then
  rec_waited(KEYS[1], r, math.max(pttl, 1) + 1000, ARGV[8])
  if now ~= nil and tonumber(ARGV[5]) > 0 then -- refused by readers: only their check sets now
    local px = math.min(math.max(pttl, 1) + 1000, tonumber(ARGV[5]))
    redis.call('ZADD', KEYS[5], now + px, ARGV[1])
    keep_at_least(KEYS[5], px)
  end
end
return {0, pttl}
