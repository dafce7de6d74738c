-- Take the lock if it is free, or if it holds our token already: an earlier try whose
-- reply was lost (a timeout while the server was frozen) still set it when the server
-- went on, and waiting out our own lock would leave no leader for its ttl. The epoch
-- comes from the event store afterwards, never from Redis, which may lose its data
-- (ADR 9); the epoch Redis last saw is returned so the store's counter can move past it
-- (schedulers of older releases counted here).
-- KEYS: lock, epoch. ARGV: token, ttl ms.
-- Returns that epoch (0 if none) if the lock is ours now, or -1 if someone else holds it.
local won = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not won and redis.call('GET', KEYS[1]) == ARGV[1] then
  won = redis.call('PEXPIRE', KEYS[1], ARGV[2]) == 1
end
if won then
  return tonumber(redis.call('GET', KEYS[2]) or '0') or 0
end
return -1
