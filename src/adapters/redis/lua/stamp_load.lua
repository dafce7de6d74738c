-- Counts one more batch of a rebuild's load in the meta, so that another process's
-- follower can tell a live load from one whose loader died. Only while the store is
-- loading under the caller's epoch: a superseded loader stamps nothing.
-- KEYS: 1 global meta
-- ARGV: 1 epoch

if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'loading') ~= '1' then return 0 end
return redis.call('HINCRBY', KEYS[1], 'load_progress', 1)
