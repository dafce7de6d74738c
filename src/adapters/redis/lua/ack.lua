-- Drops finished entries, each only for the lease that currently holds it.
-- KEYS: 1 leased, 2 state, 3 item, 4 gone, 5 lim, 6 lim:wake, 7 lim:noted
-- ARGV: 1 removal score, 2 the queue's key base, then 2 values per entry: execution id,
--       lease id
-- Returns how many entries were dropped.

local function free_limit(id)
  local desc = redis.call('HGET', KEYS[5], id)
  if desc then
    local ckey = string.match(desc, '^([^\31]*)\31')
    -- Its slot is free: waiting entries of the key get a look at the next lease.
    if ckey and ckey ~= '' and redis.call('SREM', ARGV[2] .. ':lim:run:' .. ckey, id) == 1 then
      redis.call('ZADD', KEYS[6], 0, 'c:' .. ckey)
    end
    redis.call('HDEL', KEYS[5], id)
  end
  redis.call('HDEL', KEYS[7], id)
end

local dropped = 0
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local state = redis.call('HGET', KEYS[2], id)
  if state and string.match(state, '^%d|([^|]*)|') == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    -- The version stays in ver as a tombstone, so a replayed older change cannot bring
    -- the entry back before the log's own removal arrives.
    redis.call('ZADD', KEYS[4], ARGV[1], id)
    free_limit(id)
    dropped = dropped + 1
  end
end
return dropped
