-- Leases up to #ARGV - 3 due entries of one queue in one round trip: highest priority
-- first, and within a priority the sorted set's order (ready_at, then execution id).
-- KEYS: 1..10 ready:0..9, 11 leased, 12 item, 13 state, 14 paused
-- ARGV: 1 now score, 2 deadline score, 3 deadline (exact), 4.. one lease id per slot
-- Returns execution id, lease id, item for each lease.
-- An entry is due once both the caller's clock and this server's have reached its
-- ready time: a worker whose clock runs ahead must not lease it early.
-- A paused queue leases nothing (its leases already taken run on).

if redis.call('HGET', KEYS[14], 'paused') == '1' then
  return {}
end

local wanted = #ARGV - 3
local time = redis.call('TIME')
local server_now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local due = math.min(tonumber(ARGV[1]), server_now)
local out, taken = {}, 0
for priority = 9, 0, -1 do
  if taken == wanted then break end
  local ready = KEYS[priority + 1]
  local ids = redis.call('ZRANGEBYSCORE', ready, '-inf', due, 'LIMIT', 0, wanted - taken)
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
