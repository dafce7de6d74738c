-- Sets one queue's pause record unless the stored one has the same or a newer version,
-- so a page of Queue events can be replayed safely (as apply.lua does for entries).
-- KEYS: 1 meta, 2 paused
-- ARGV: 1 epoch, 2 listed ('1' when the global queue set names this queue),
--       3 version, 4 paused ('1' or '0'), 5 record (msgpack QueuePause)
-- Returns 1 when applied, 0 when older, or -1 when the queue's data was lost.

local meta = redis.call('GET', KEYS[1])
if not meta then
  -- A listed queue without its meta lost its keys; an unlisted one is new.
  if ARGV[2] == '1' then return -1 end
  redis.call('SET', KEYS[1], ARGV[1])
elseif meta ~= ARGV[1] then
  return -1
end

local stored = redis.call('HGET', KEYS[2], 'version')
if stored and tonumber(ARGV[3]) <= tonumber(stored) then
  return 0
end
redis.call('HSET', KEYS[2], 'version', ARGV[3], 'paused', ARGV[4], 'record', ARGV[5])
return 1
