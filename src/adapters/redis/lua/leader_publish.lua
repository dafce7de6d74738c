-- Show a new leader's epoch beside the lock, only while the lock still holds its
-- token: a leader that lost the lock meanwhile must not announce itself.
-- KEYS: lock, epoch. ARGV: token, epoch. Returns 1 if announced, 0 if the lock is gone.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2])
  return 1
end
return 0
