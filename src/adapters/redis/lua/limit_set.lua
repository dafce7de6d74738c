-- Sets one named limit unless the stored one has the same or a newer version, so a
-- page of Limit events can be replayed safely (as pause.lua does for queues).
-- KEYS: 1 the named limits hash
-- ARGV: 1 name, 2 version, 3 record (msgpack NamedLimit)
-- Returns 1 when applied, 0 when older.

local stored = redis.call('HGET', KEYS[1], 'v:' .. ARGV[1])
if stored and tonumber(ARGV[2]) <= tonumber(stored) then
  return 0
end
redis.call('HSET', KEYS[1], 'v:' .. ARGV[1], ARGV[2], 'r:' .. ARGV[1], ARGV[3])
return 1
