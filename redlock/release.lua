-- release.lua: compare-and-delete.
-- KEYS: [lock, meta]  ARGV: [token]
-- => 1 deleted (token held it), 0 no lock here, -1 held by another token
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
elseif v == false then
  return 0
end
return -1
