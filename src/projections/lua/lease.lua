-- Leases up to #ARGV - 3 due entries of one queue in one round trip: highest priority
-- first, and within a priority the sorted set's order (ready_at, then execution id).
-- KEYS: 1..10 ready:0..9, 11 leased, 12 item, 13 state
-- ARGV: 1 now score, 2 deadline score, 3 deadline (exact), 4.. one lease id per slot
-- Returns execution id, lease id, item for each lease.

local wanted = #ARGV - 3
local out, taken = {}, 0
for priority = 9, 0, -1 do
  if taken == wanted then break end
  local ready = KEYS[priority + 1]
  local ids = redis.call('ZRANGEBYSCORE', ready, '-inf', ARGV[1], 'LIMIT', 0, wanted - taken)
  for _, id in ipairs(ids) do
    taken = taken + 1
    local lease_id = ARGV[3 + taken]
    redis.call('ZREM', ready, id)
    redis.call('ZADD', KEYS[11], ARGV[2], id)
    redis.call('HSET', KEYS[13], id, priority .. '|' .. lease_id .. '|' .. ARGV[3])
    -- The caller reads attempt, version and spec from the item; Lua never decodes it.
    out[#out + 1] = id
    out[#out + 1] = lease_id
    out[#out + 1] = redis.call('HGET', KEYS[12], id)
  end
end
return out
