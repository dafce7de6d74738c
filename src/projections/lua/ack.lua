-- Drops a finished entry, only for the lease that currently holds it.
-- KEYS: 1 leased, 2 state, 3 item, 4 gone
-- ARGV: 1 execution id, 2 lease id, 3 removal score

local state = redis.call('HGET', KEYS[2], ARGV[1])
if not state or string.match(state, '^%d|([^|]*)|') ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
-- The version stays in ver as a tombstone, so a replayed older change cannot bring the
-- entry back before the log's own removal arrives.
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
return 1
