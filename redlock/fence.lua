-- fence.lua: the fence counter of a resource, part of the scripts' prelude (prelude.lua includes
-- it). No key lives forever: a counter lives idle_ms (Options.FenceIdleTTL) after it was made
-- or last raised (fence_claim), not after each increment: an uncontended acquire pays one INCR
-- and no PEXPIRE. A counter made anew (the first fence of a resource, after its counter expired,
-- or on a node restarted empty) starts at floor, the coordinator's clock in microseconds, above
-- every fence handed out before (the argument and its assumption are in docs/safety.md, fencing
-- tokens). Every node of a round gets the same floor, so a new resource's nodes agree on its
-- first fence. Integers stay exact: Lua numbers are doubles, and microseconds since 1970 stay
-- below 2^53 until the year 2255; values are written with %d.

local function fence_write(key, f, idle_ms)
  redis.call('SET', key, string.format('%d', f), 'PX', idle_ms)
end
-- fence_next hands out this node's next fence: one more than the counter, or the floor. INCR
-- makes a missing counter 1, which no counter holds otherwise (floors are far above it).
local function fence_next(key, idle_ms, floor)
  local f = redis.call('INCR', key)
  if f == 1 then
    f = tonumber(floor)
    fence_write(key, f, idle_ms)
  end
  return f
end
-- fence_counter is this node's counter, 0 when it has none.
local function fence_counter(key)
  return tonumber(redis.call('GET', key) or '0')
end
-- fence_peek is what fence_next would hand out, less one.
local function fence_peek(key, floor)
  return tonumber(redis.call('GET', key) or (tonumber(floor) - 1))
end
-- fence_claim makes fence f this token's on this node, as fence_next made it when it returned f:
-- raises the counter to f when it is below (no later fence_next hands out f or less), and says
-- whether f is this token's here (mine: f is the fence this node recorded for the token).
-- Each node gives each value to at most one token, so a fence claimed on a quorum is one holder's.
local function fence_claim(key, f, idle_ms, mine)
  if fence_counter(key) < f then
    fence_write(key, f, idle_ms)
    return true
  end
  return mine
end
