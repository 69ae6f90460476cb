-- prelude.lua: the functions the scripts share. Where the scripts are loaded (scripts.go), each
-- gets the functions of this file that it calls, and those they call, put before it: no script
-- carries a copy of its own, and none pays on each run for a function it does not call. A
-- function here ends with an 'end' at the start of a line, and calls only functions above it.
--
-- The keys of a lock on a node, as the scripts' KEYS name them:
--   lock     the lock's record (see rec_read): its writer, or a marker of its readers, or a
--            tombstone of its last releases; one string, the only key an uncontended writer's
--            acquire and release touch besides the fence counter
--   fence    the fence counter (fence.lua)
--   readers  the readers (see read_acquire.lua): a sorted set, token -> its expiry in ms of this
--            node's clock
--   rmeta    the readers' records: a hash of '<token>:fence', '<token>:nf' and '<token>:owner'
--   wwait    the writers waiting behind readers (see acquire.lua)
-- A semaphore's permits add keys of their own (permits.lua).

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

-- A script never hashes a token: where it remembers or announces a release it is given the
-- token's fingerprint (fp below: 16 hex digits, pubsub.go's fingerprint), what a node keeps of a
-- released token and what it announces, never the token.

-- rec_read is the record that a lock key's value v (GET's reply) holds, or nil when there is no
-- key. A record is six fields, separated by single spaces, the owner last (it may hold spaces):
--   holder    the writer's token; '^' its readers (the key lives as long as the last of them);
--             '~' nobody: a tombstone, kept to remember the last releases
--   nf        this node's tentative fence for the writer (fence.lua), or '-'
--   fence     the fence the coordinator chose for the writer (commit.lua), or '-'
--   flags     '-', or a waiting mark: someone waits for the lock, so its release is announced
--             (announce): 'w:<gateway>' when only waiters of that gateway marked it (see
--             rec_mark), 'w' when waiters of several did
--   released  the fingerprints of the tokens of the last releases of the lock here, newest
--             first, separated by commas (at most 8: see rec_remember), or '-': a retried
--             release is told it worked
--   owner     the writer's owner ('' if none)
-- A value of no such form (a bare token, as an older gateway wrote) is its holder's alone.
-- Tokens are never '^' or '~' and hold no spaces or commas.
local function rec_read(v)
  if not v then
    return nil
  end
  local h, nf, fence, flags, rel, owner = string.match(v, '^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
  if not h then
    return {holder = v, nf = '-', fence = '-', flags = '-', rel = '-', owner = ''}
  end
  return {holder = h, nf = nf, fence = fence, flags = flags, rel = rel, owner = owner}
end

-- lock_get is the value of a lock key, GET's reply: where the lock scripts that a wrapper runs
-- (acquire, commit, extend and release.lua: see permit_find.lua, multi_acquire.lua) read their
-- record. A wrapper that read the key already defines a lock_get of its own before the script,
-- which the script then calls instead (Lua's scoping), so that the key is read once.
local function lock_get(key)
  return redis.call('GET', key)
end

-- lock_taken is the lock_get of such a wrapper: the value of key that the wrapper read already
-- (read: key -> GET's reply), taken from read, once; else GET's reply.
local function lock_taken(read, key)
  local v = read[key]
  read[key] = nil
  if v == nil then
    return redis.call('GET', key)
  end
  return v
end

-- rec_write writes the record r to lock, with SET's options (PX ms, or KEEPTTL). One
-- concatenation of the fields: no table to build for table.concat.
local function rec_write(lock, r, ...)
  redis.call('SET', lock, r.holder .. ' ' .. r.nf .. ' ' .. r.fence .. ' ' .. r.flags .. ' ' .. r.rel .. ' ' .. r.owner, ...)
end

-- rec_writer says whether r is a writer's record (not nil, a readers' marker or a tombstone).
local function rec_writer(r)
  return r ~= nil and r.holder ~= '^' and r.holder ~= '~'
end

-- rec_num is a record's fence field as a number, or nil when it is '-'.
local function rec_num(field)
  if field == '-' then
    return nil
  end
  return tonumber(field)
end

-- rec_shown is a record's fence field as the replies show it: '' for '-'.
local function rec_shown(field)
  if field == '-' then
    return ''
  end
  return field
end

-- rec_released says whether the token of fingerprint fp is among the last releases that r
-- remembers.
local function rec_released(r, fp)
  return r ~= nil and string.find(',' .. r.rel .. ',', ',' .. fp .. ',', 1, true) ~= nil
end

-- rec_mark is the waiting mark of a record marked a and b (each '-' or a mark): one gateway's
-- when they agree, 'w' (several gateways') when they do not.
local function rec_mark(a, b)
  if a == '-' or a == b then
    return b
  elseif b == '-' then
    return a
  end
  return 'w'
end

-- rec_waited marks r (the record of lock) as waited for by a waiter of the gateway whose mark
-- is mark ('w:<gateway>'), so that its release is announced: at most one write while it is so
-- marked. With no record (a lock refused by waiting writers alone, see read_acquire.lua) a
-- tombstone carries the mark for px ms.
local function rec_waited(lock, r, px, mark)
  if r == nil then
    rec_write(lock, {holder = '~', nf = '-', fence = '-', flags = mark, rel = '-', owner = ''}, 'PX', px)
  elseif rec_mark(r.flags, mark) ~= r.flags then
    r.flags = rec_mark(r.flags, mark)
    rec_write(lock, r, 'KEEPTTL')
  end
end

-- rec_remember puts fp (a token's fingerprint) first among the last releases that r remembers,
-- keeping at most 8: fingerprints are 16 characters long, so the 7 newest are the first 7 * 17 - 1
-- (one cut, not a search for the 7th comma). A list written before fingerprints (tokens) is cut
-- there too: a token cut short is forgotten.
local function rec_remember(r, fp)
  if r.rel == '-' then
    r.rel = fp
  else
    r.rel = fp .. ',' .. string.sub(r.rel, 1, 7 * 17 - 1)
  end
end

-- rec_tombstone makes r, the record of lock whose holder released it, what lock holds then:
-- nobody, and the holder's token (of fingerprint fp) first among the last releases
-- (rec_remember), for keep_ms. keep_ms '0' (undoing a failed acquire: no release of it can be
-- retried; fp is not used) adds nothing and keeps the key's TTL, or deletes the key when it
-- remembers no release.
local function rec_tombstone(lock, r, fp, keep_ms)
  r.holder, r.nf, r.fence, r.flags, r.owner = '~', '-', '-', '-', ''
  if keep_ms ~= '0' then
    rec_remember(r, fp)
    rec_write(lock, r, 'PX', keep_ms)
  elseif r.rel == '-' then
    redis.call('DEL', lock)
  else
    rec_write(lock, r, 'KEEPTTL')
  end
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

-- lock_grant is acquire.lua's grant of a free lock (and the hand-over's, permit_handover.lua):
-- token becomes the writer of lock for ttl ms, with this node's next fence as its tentative one,
-- which it returns. old is the record it replaces (a tombstone, a stale readers' marker, or
-- nil), whose last releases it keeps; flags are the new record's.
local function lock_grant(lock, old, fencekey, token, ttl, owner, idle_ms, floor, flags)
  local f = fence_next(fencekey, idle_ms, floor)
  local rel = '-'
  if old then
    rel = old.rel
  end
  rec_write(lock, {holder = token, nf = string.format('%d', f), fence = '-', flags = flags, rel = rel,
    owner = owner}, 'PX', ttl)
  return f
end

-- record_read is the record of a reader (hash rmeta, prefix '<token>:'): its chosen fence,
-- tentative fence and owner, each unset (nil, or '' as the replies show it) if not written.
local function record_read(hash, prefix, unset)
  local m = redis.call('HMGET', hash, prefix .. 'fence', prefix .. 'nf', prefix .. 'owner')
  return m[1] or unset, m[2] or unset, m[3] or unset
end

-- record_forget deletes a reader's record (prefix '<token>:') from rmeta.
local function record_forget(rmeta, prefix)
  redis.call('HDEL', rmeta, prefix .. 'fence', prefix .. 'nf', prefix .. 'owner')
end

-- last_expiry is the latest expiry (ms) of a sorted set of tokens (readers, wwait), or nil.
local function last_expiry(set)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  return tonumber(last[2])
end

-- readers_live says whether a reader that has not expired by now (ms) holds the lock here. Without
-- now, at this node's time.
local function readers_live(readers, now)
  return redis.call('ZCOUNT', readers, '(' .. (now or now_ms()), '+inf') > 0
end

-- announce publishes the release of lock by the token of fingerprint fp on channel if someone
-- waits for it (r, the released record, is marked, or the key waiting exists: a semaphore's, see
-- permit_acquire.lua): "<lock key>|<fp>", so that waiting acquires wake at once and a waiter can
-- ignore its own releases. Nobody waiting: no message.
local function announce(r, waiting, channel, lock, fp)
  if r.flags ~= '-' or (waiting and redis.call('EXISTS', waiting) == 1) then
    redis.call('PUBLISH', channel, lock .. '|' .. fp)
  end
end
