-- Take the lock if it is free and raise the epoch in the same step, so two leaders
-- can never share an epoch. KEYS: lock, epoch. ARGV: token, ttl ms.
-- Returns the new epoch, or 0 if someone else holds the lock.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
