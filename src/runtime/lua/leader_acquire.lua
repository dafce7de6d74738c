-- Take the lock if it is free. The epoch comes from the event store afterwards, never
-- from Redis, which may lose its data (ADR 9). KEYS: lock. ARGV: token, ttl ms.
-- Returns 1 if the lock is ours now, or 0 if someone else holds it.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
