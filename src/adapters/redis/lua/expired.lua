-- Lists leases past their deadline with the lease id that holds each, in one read.
-- KEYS: 1 leased, 2 state
-- ARGV: 1 now score, 2 limit
-- Returns execution id, state for each expired lease.

local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[2], id)
end
return out
