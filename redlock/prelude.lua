-- prelude.lua: the functions the scripts share. Where the scripts are loaded (scripts.go), each
-- gets the functions of this file that it calls, and those they call, put before it: no script
-- carries a copy of its own, and none pays on each run for a function it does not call. A
-- function here ends with an 'end' at the start of a line, and calls only functions above it.
--
-- The keys of a lock on a node, as the scripts' KEYS name them:
--   lock     the writer's token, for the lock's TTL (a permit's: the lock prefix .. permit)
--   meta     the writer's record: a hash of 'fence' (the fence the coordinator chose for it, see
--            commit.lua), 'nf' (this node's tentative fence) and 'owner'; as long as the lock
--   readers  the readers (see read_acquire.lua): a sorted set, token -> its expiry in ms of this
--            node's clock
--   rmeta    the readers' records: a hash of the same fields, '<token>:fence' and so on
--   fence    the fence counter (fence.lua)
--   waiting  set while someone waits for the lock: its release is announced (see announce)
--   wwait    the writers waiting behind readers (see acquire.lua)
--   released a release's tombstone (see release.lua)

-- now_ms is this node's clock in ms.
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- keep_at_least makes key live at least px ms more.
local function keep_at_least(key, px)
  if redis.call('PTTL', key) < px then
    redis.call('PEXPIRE', key, px)
  end
end

-- INCLUDE fence.lua

-- record_read is the record of a holder: a writer's (hash meta, prefix '') or a reader's (hash
-- rmeta, prefix '<token>:'): its chosen fence, tentative fence and owner, each unset (nil, or ''
-- as the replies show it) if not written.
local function record_read(hash, prefix, unset)
  local m = redis.call('HMGET', hash, prefix .. 'fence', prefix .. 'nf', prefix .. 'owner')
  return m[1] or unset, m[2] or unset, m[3] or unset
end

-- record_forget deletes a reader's record (prefix '<token>:') from rmeta.
local function record_forget(rmeta, prefix)
  redis.call('HDEL', rmeta, prefix .. 'fence', prefix .. 'nf', prefix .. 'owner')
end

-- held_again is acquire.lua's reply to a token that holds the lock here already: the fence
-- recorded for it (c = 1: the chosen one; c = 0: this node's tentative one) and counter, this
-- node's fence counter; nil when no fence is recorded for it.
local function held_again(fence, nf, counter)
  if fence then
    return {1, tonumber(fence), 1, 1, counter}
  elseif nf then
    return {1, tonumber(nf), 1, 0, counter}
  end
  return nil
end

-- lock_set makes token the writer of lock for ttl ms, with a new record: owner, and field
-- ('fence' or 'nf') set to value.
local function lock_set(lock, meta, token, ttl, owner, field, value)
  redis.call('SET', lock, token, 'PX', ttl)
  redis.call('DEL', meta)
  redis.call('HSET', meta, 'owner', owner, field, value)
  redis.call('PEXPIRE', meta, ttl)
end

-- lock_grant is acquire.lua's grant of a free lock (and the hand-over's, permit_handover.lua):
-- token becomes its writer, with this node's next fence as its tentative one, which it returns.
local function lock_grant(lock, meta, fencekey, token, ttl, owner, idle_ms, floor)
  local f = fence_next(fencekey, idle_ms, floor)
  lock_set(lock, meta, token, ttl, owner, 'nf', string.format('%d', f))
  return f
end

-- lock_renew gives the writer's lock and record ttl ms more.
local function lock_renew(lock, meta, ttl)
  redis.call('PEXPIRE', lock, ttl)
  redis.call('PEXPIRE', meta, ttl)
end

-- last_expiry is the latest expiry (ms) of a sorted set of tokens (readers, wwait), or nil.
local function last_expiry(set)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  return tonumber(last[2])
end

-- readers_live says whether a reader that has not expired by now (ms) holds the lock here. Without
-- now, at this node's time, taken only if the readers key exists.
local function readers_live(readers, now)
  if now == nil then
    if redis.call('EXISTS', readers) == 0 then
      return false
    end
    now = now_ms()
  end
  return redis.call('ZCOUNT', readers, '(' .. now, '+inf') > 0
end

-- announce publishes the release of lock by token on channel if someone waits for it (the
-- waiting key): "<lock key>|<first 16 hex of sha1(token)>", so that waiting acquires wake at once
-- and a waiter can ignore its own releases. Nobody waiting: no message.
local function announce(waiting, channel, lock, token)
  if redis.call('EXISTS', waiting) == 1 then
    redis.call('PUBLISH', channel, lock .. '|' .. string.sub(redis.sha1hex(token), 1, 16))
  end
end

-- tombstone marks a release for keep_ms (the key is of the lock and the token), so that a retried
-- release is told it worked; keep_ms '0' (undoing a failed acquire) leaves none.
local function tombstone(released, keep_ms)
  if keep_ms ~= '0' then
    redis.call('SET', released, '1', 'PX', keep_ms)
  end
end
