-- Extend the lock only while it still holds our token: a leader whose lock expired
-- and was taken must not extend the new holder's. KEYS: lock. ARGV: token, ttl ms.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
