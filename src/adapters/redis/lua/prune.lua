-- Forgets up to ARGV[2] tombstones removed before ARGV[1] (a score, exclusive); the
-- caller repeats while a full batch comes back, so no call blocks Redis for long.
-- KEYS: 1 gone, 2 ver

local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
end
return #ids
