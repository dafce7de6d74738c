-- Delete the lock only if it is still ours, so a late release never frees another
-- leader's lock. KEYS: lock. ARGV: token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
