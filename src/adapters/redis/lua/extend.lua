-- Moves a lease deadline, only for the lease that currently holds the entry.
-- KEYS: 1 leased, 2 state
-- ARGV: 1 execution id, 2 lease id, 3 deadline score, 4 deadline (exact)

local state = redis.call('HGET', KEYS[2], ARGV[1])
if not state then return 0 end
local priority, lease_id = string.match(state, '^(%d)|([^|]*)|')
-- An entry that is not leased has an empty lease id, which never matches.
if lease_id ~= ARGV[2] then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], priority .. '|' .. lease_id .. '|' .. ARGV[4])
return 1
