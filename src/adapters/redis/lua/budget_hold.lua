-- One more open hold under KEYS[1] (a zset: ticket -> deadline in ms), unless ARGV[2]
-- are open. Holds past their deadline are dropped first: a process that died holding
-- some frees them so. ARGV: now (ms), cap, deadline (ms), ticket.
-- Returns {1, 0} when held, {0, ms until the next hold ends} when full.
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
local deadline = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], deadline, ARGV[4])
if redis.call('PTTL', KEYS[1]) < deadline - now then
  redis.call('PEXPIRE', KEYS[1], deadline - now)
end
return {1, 0}
