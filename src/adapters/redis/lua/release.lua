-- Hands a lease back: the entry is pending again, in the ready set of its priority.
-- KEYS: 1 leased, 2 state, 3..12 ready:0..9, 13 lim, 14 lim:wake
-- ARGV: 1 execution id, 2 lease id, 3 ready score, 4 ready_at (exact), 5 the queue's
--       key base

local state = redis.call('HGET', KEYS[2], ARGV[1])
if not state then return 0 end
local priority, lease_id = string.match(state, '^(%d)|([^|]*)|')
if lease_id ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[3 + tonumber(priority)], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], priority .. '||' .. ARGV[4])
local desc = redis.call('HGET', KEYS[13], ARGV[1])
local ckey = desc and string.match(desc, '^([^\31]*)\31')
if ckey and ckey ~= '' and redis.call('SREM', ARGV[5] .. ':lim:run:' .. ckey, ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[14], 0, 'c:' .. ckey)
end
return 1
