-- permits.lua: the index of a semaphore's permits on this node, which each permit script includes
-- (-- INCLUDE permits.lua) so that no call looks through the limit's permits (see permit.go and
-- docs/semaphores.md). Permit i is the lock whose lock key is KEYS[1] .. i; its record is the
-- truth (the permit is held iff it names a holder, see rec_read), and the index says where to
-- look:
--   permits  a sorted set: permit i -> when its lock key expires, in ms of this node's clock
--            (TIME + PTTL: never before the key does). Its size is the number of permits held
--            here, its first member the one that expires first (soonest); sweep drops the
--            members whose time has passed.
--   holders  a sorted set: token -> the permit it holds here (a token holds at most one permit
--            on a node). Its scores are the permits held, in order: firstFree bisects its ranks.
--   limit    the limit the permits here are held with.
-- Each set has a member per permit held (or held until lately: sweep and record drop the rest),
-- at most one per permit. The three keys live at least as long as the longest-lived permit they
-- describe (keep), and an entry of holders is believed only once the lock key confirms it (mine;
-- a release's by release.lua itself, see permit_find.lua).
-- A script's KEYS end with [limit, permits, holders]; they are taken off here.
local holderskey = table.remove(KEYS)
local permitskey = table.remove(KEYS)
local limitkey = table.remove(KEYS)
local lockp = KEYS[1]

-- sweep drops the permits expired by now (ms) from both sets: each expiry is dropped once.
local function sweep(now)
  local gone = redis.call('ZRANGEBYSCORE', permitskey, '-inf', now)
  if #gone == 0 then
    return
  end
  for _, i in ipairs(gone) do
    redis.call('ZREMRANGEBYSCORE', holderskey, i, i)
  end
  redis.call('ZREMRANGEBYSCORE', permitskey, '-inf', now)
end

-- soonest is the permit that expires first here and its remaining TTL in ms, or nil when none
-- is held, once the permits that expired are swept. None has while the first one's lock key
-- lives (the others expire later; a released permit leaves the index), so that one's PTTL tells
-- whether to sweep.
local function soonest()
  local first = redis.call('ZRANGE', permitskey, 0, 0, 'WITHSCORES')
  if not first[1] then
    return nil, nil
  end
  local pttl = redis.call('PTTL', lockp .. first[1])
  if pttl >= 0 then
    return tonumber(first[1]), pttl
  end
  sweep(now_ms())
  first = redis.call('ZRANGE', permitskey, 0, 0)
  if not first[1] then
    return nil, nil
  end
  return tonumber(first[1]), math.max(redis.call('PTTL', lockp .. first[1]), 0)
end

-- read holds the values of the permits' lock keys that holds read, for the lock script that the
-- caller runs next on one of them (lock_get, see prelude.lua).
local read = {}
local function lock_get(key)
  return lock_taken(read, key)
end

-- holds says whether token holds permit i here: its record names it.
local function holds(i, token)
  local v = redis.call('GET', lockp .. i)
  read[lockp .. i] = v
  local r = rec_read(v)
  return r ~= nil and r.holder == token
end

-- mine is the permit that token holds here, or -1. An entry that the lock key denies is dropped.
local function mine(token)
  local i = redis.call('ZSCORE', holderskey, token)
  if not i then
    return -1
  end
  if holds(i, token) then
    return tonumber(i)
  end
  redis.call('ZREM', holderskey, token)
  return -1
end

-- keep makes the limit and the two sets live until the last permit held here expires (now: this
-- node's clock in ms), the latest score of permits (last, when the caller knows it): no longer
-- than the permits they describe, and never shorter, whatever the order of their grants and
-- extensions. One read (none with last) and three writes, whether the key lived longer or was
-- just made by ZADD (and has no TTL yet). A PEXPIRE counts from the node's clock at that call,
-- which may tick between two: holders first, so that permits never expires before holders (a
-- script that finds permits expired finds holders expired too, which record relies on), and
-- holders not before last (the clock is at now or later).
local function keep(now, last)
  last = last or tonumber(redis.call('ZRANGE', permitskey, -1, -1, 'WITHSCORES')[2])
  local px = math.max(last - now, 1)
  for _, k in ipairs({holderskey, permitskey, limitkey}) do
    redis.call('PEXPIRE', k, px)
  end
end

-- note notes when permit i expires here, its lock key set or extended as of now (ms). px is the
-- lock key's TTL when the caller just set it (nil: read it); alone says that no other permit is
-- held here (the caller found none), so that this one's expiry is the latest.
local function note(i, now, px, alone)
  px = px or redis.call('PTTL', lockp .. i)
  redis.call('ZADD', permitskey, now + px, i)
  keep(now, alone and now + px or nil)
end

-- record notes that token holds permit i here (see note), dropping a holder of i that no sweep
-- has dropped yet. Alone, there is none: holders' scores are members of permits (every script
-- writes and drops the two together, and keep gives them one expiry), and permits is empty.
local function record(i, token, now, px, alone)
  if not alone then
    redis.call('ZREMRANGEBYSCORE', holderskey, i, i)
  end
  redis.call('ZADD', holderskey, i, token)
  note(i, now, px, alone)
end

-- drop notes that token released permit i here.
local function drop(i, token)
  redis.call('ZREM', permitskey, i)
  redis.call('ZREM', holderskey, token)
end

-- remember notes, in the semaphore's list of releases (key: the tokens' fingerprints, newest
-- first), that the token of fingerprint fp released its permit here, for keep_ms: a retried
-- release finds it there (released). The list keeps at least the last 8 releases per permit of
-- the limit, as a lock's record keeps its last 8 (rec_remember), and lives keep_ms after the
-- latest (its PEXPIRE follows the push in the same call, so the list is never left without a
-- TTL): one key per semaphore however often its permits are released. It is trimmed back to
-- those when a push makes it twice as long (LPUSH answers the length): one release in 8 × limit
-- pays an LTRIM, not each. keep_ms is never '0' here (an undone acquire remembers
-- nothing).
local function remember(key, fp, keep_ms, limit)
  local keep = 8 * math.max(limit or 1, 1)
  if redis.call('LPUSH', key, fp) > 2 * keep then
    redis.call('LTRIM', key, 0, keep - 1)
  end
  redis.call('PEXPIRE', key, keep_ms)
end

-- released says whether the release of the token of fingerprint fp is among those the list key
-- remembers (remember).
local function released(key, fp)
  return redis.call('LPOS', key, fp) ~= false
end

-- firstFree is the first permit in [from, below) that is held by none here, or -1: the permits
-- held from 'from' on are at ranks r, r + 1, ... of holders and read from, from + 1, ... up to
-- the first free one, found by bisecting the ranks (a few ZRANGEs, however many are held).
local function firstFree(from, below)
  if from >= below then
    return -1
  end
  local r = redis.call('ZCOUNT', holderskey, '-inf', '(' .. from)
  local n = redis.call('ZCOUNT', holderskey, '-inf', '(' .. below)
  local lo, hi = 0, n - r -- the answer is from + lo for the least lo whose rank holds more
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local s = redis.call('ZRANGE', holderskey, r + mid, r + mid, 'WITHSCORES')
    if tonumber(s[2]) > from + mid then
      hi = mid
    else
      lo = mid + 1
    end
  end
  if from + lo < below then
    return from + lo
  end
  return -1
end
