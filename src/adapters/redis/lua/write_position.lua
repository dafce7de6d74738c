-- Records the log position only if the store still has the caller's epoch; a missing
-- meta (flush, restart without persistence) fails the same way. A position written
-- ends the load of the rebuild that reset the store.
-- KEYS: 1 global meta
-- ARGV: 1 epoch, 2 position

if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'position', ARGV[2], 'loading', '0')
return 1
