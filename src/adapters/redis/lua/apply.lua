-- Applies one page of changes to one queue; a change is skipped unless its version is
-- newer than the stored one (or force is set), so pages can be replayed safely.
-- KEYS: 1 meta, 2 ver, 3 item, 4 state, 5 gone, 6 leased, 7 dead, 8..17 ready:0..9,
--       18 lim, 19 lim:wake, 20 lim:noted; on one server (not a cluster, where these
--       live in other slots) also 21 the global meta and 22 the global queue set
-- ARGV: 1 epoch, 2 listed ('1' when the global queue set names this queue; with KEYS
--       21 and 22 the script looks itself), 3 force ('1' or '0'), 4 removal score,
--       5 the queue's key base, 6 the queue's name, 7 the queue set's mark of the
--       epoch, 8 the log position to record after the page ('' for none; only with
--       KEYS 21 and 22), then 7 values per change: execution id, version, target key
--       index (0 removes the entry; negative: the event left the entry as it was, see
--       below), score, item, state, limits (lease.lua's lim format; empty for none)
-- An entry the worker side holds keeps what it did since the last apply, none of which
-- the log records: an unchanged entry whose stored version is the one just before only
-- moves its version on (and its item, which carries it), and a leased entry put again
-- under the lease that holds it keeps the later of the two deadlines (heartbeats).
-- Returns the number of changes applied, or -1 when the store's data was lost (nothing
-- is written then).

local whole = #KEYS > 20
local listed = ARGV[2]
if whole then
  -- The checks write_position and the caller's look at the store made before: the
  -- global epoch, the queue set whole (its mark), and whether it names this queue.
  if redis.call('HGET', KEYS[21], 'epoch') ~= ARGV[1] then return -1 end
  if redis.call('SISMEMBER', KEYS[22], ARGV[7]) == 0 then return -1 end
  listed = tostring(redis.call('SISMEMBER', KEYS[22], ARGV[6]))
end

local meta = redis.call('GET', KEYS[1])
if not meta then
  -- A listed queue without its meta lost its keys; an unlisted one is new.
  if listed == '1' then return -1 end
  redis.call('SET', KEYS[1], ARGV[1])
elseif meta ~= ARGV[1] then
  return -1
end

local base = ARGV[5]

local function limit_keys(desc)
  local ckey, rkey = string.match(desc, '^([^\31]*)\31[^\31]*\31([^\31]*)\31')
  return ckey or '', rkey or ''
end

local function unlink_entry(id)
  -- The state hash names the only ready set the entry can be in.
  local state = redis.call('HGET', KEYS[4], id)
  if state then
    redis.call('ZREM', KEYS[8 + tonumber(string.sub(state, 1, 1))], id)
  end
  redis.call('ZREM', KEYS[6], id)
  redis.call('ZREM', KEYS[7], id)
  local desc = redis.call('HGET', KEYS[18], id)
  if not desc then return end
  local ckey, rkey = limit_keys(desc)
  if ckey ~= '' then
    -- A slot it held is free: waiting entries of the key get a look at the next lease.
    if redis.call('SREM', base .. ':lim:run:' .. ckey, id) == 1 then
      redis.call('ZADD', KEYS[19], 0, 'c:' .. ckey)
    end
    redis.call('ZREM', base .. ':lim:wait:c:' .. ckey, id)
  end
  if rkey ~= '' then redis.call('ZREM', base .. ':lim:wait:r:' .. rkey, id) end
end

-- The score and state to put a leased entry with: the held lease's later deadline
-- wins. A state untouched since it was applied has no exact time; the score then
-- stands for it (to the millisecond, rounded up as due scores are).
local function held_deadline(id, score, state)
  local held = redis.call('HGET', KEYS[4], id)
  if not held then return score, state end
  local priority, lease_id, exact = string.match(held, '^(%d)|([^|]*)|(.*)$')
  if lease_id == '' or state ~= priority .. '|' .. lease_id .. '|' then return score, state end
  local live = redis.call('ZSCORE', KEYS[6], id)
  if not live or tonumber(live) <= tonumber(score) then return score, state end
  if exact == '' then exact = string.format('%.0f', tonumber(live) * 1000) end
  return live, state .. exact
end

local applied = 0
for i = 9, #ARGV, 7 do
  local id, version, target = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local stored = redis.call('HGET', KEYS[2], id)
  local newer = ARGV[3] == '1' or not stored or tonumber(version) > tonumber(stored)
  if target < 0 and newer and ARGV[3] ~= '1' and stored
      and tonumber(version) == tonumber(stored) + 1 then
    redis.call('HSET', KEYS[2], id, version)
    if redis.call('HEXISTS', KEYS[3], id) == 1 then redis.call('HSET', KEYS[3], id, ARGV[i + 4]) end
    applied = applied + 1
    newer = false
  end
  if target < 0 then target = -target end
  if newer then
    local score, state = ARGV[i + 3], ARGV[i + 5]
    if target == 6 then score, state = held_deadline(id, score, state) end
    unlink_entry(id)
    redis.call('HSET', KEYS[2], id, version)
    if target == 0 then
      redis.call('HDEL', KEYS[3], id)
      redis.call('HDEL', KEYS[4], id)
      redis.call('HDEL', KEYS[18], id)
      redis.call('HDEL', KEYS[20], id)
      redis.call('ZADD', KEYS[5], ARGV[4], id)
    else
      redis.call('HSET', KEYS[3], id, ARGV[i + 4])
      redis.call('HSET', KEYS[4], id, state)
      redis.call('ZREM', KEYS[5], id)
      redis.call('ZADD', KEYS[target], score, id)
      local desc = ARGV[i + 6]
      if desc == '' then
        redis.call('HDEL', KEYS[18], id)
      else
        redis.call('HSET', KEYS[18], id, desc)
        local ckey = limit_keys(desc)
        if target == 6 and ckey ~= '' then
          redis.call('SADD', base .. ':lim:run:' .. ckey, id)
        end
      end
    end
    applied = applied + 1
  end
end
if whole then
  if listed ~= '1' then redis.call('SADD', KEYS[22], ARGV[6]) end
  if ARGV[8] ~= '' then redis.call('HSET', KEYS[21], 'position', ARGV[8], 'loading', '0') end
end
return applied
