-- Leases up to N due entries of one queue in one round trip: highest priority first,
-- and within a priority the sorted set's order (ready_at, then execution id).
-- KEYS: 1..10 ready:0..9, 11 leased, 12 item, 13 state, 14 paused, 15 lim, 16 lim:wake,
--       17 lim:noted, 18 lim:vals
-- ARGV: 1 now score, 2 deadline score, 3 deadline (exact), 4 the queue's key base,
--       5 M named limits, then 4 per named limit (name, concurrency, rate, per ms; an
--       empty value does not limit), then one lease id per slot
-- Returns L, then execution id, lease id, item for each of L leases, then execution
-- id, kind ('c' or 'r'), key for each entry set aside for the first time.
-- An entry is due once both the caller's clock and this server's have reached its
-- ready time: a worker whose clock runs ahead must not lease it early.
-- A paused queue leases nothing (its leases already taken run on).
--
-- Limits (lim holds an entry's: concurrency key, max, rate key, limit, per ms, joined
-- by \31). A due entry over a limit is set aside: moved from its ready set to the
-- wait set of that limit, scored so that priority then ready time order it, and it is
-- not looked at again until the limit has room: a freed slot (ack, release, apply)
-- or the end of a rate window puts the limit in lim:wake, and a round first moves as
-- many waiting entries back as the limit has room for. Rate windows count starts by
-- the caller's clock (the time the lease records). Keys named here beside KEYS share
-- the queue's hash tag, so every key of this script is in one cluster slot.

if redis.call('HGET', KEYS[14], 'paused') == '1' then
  return {0}
end

local base = ARGV[4]
local named = {}
local named_count = tonumber(ARGV[5])
for i = 0, named_count - 1 do
  local at = 6 + 4 * i
  named[ARGV[at]] = {ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]}
end
local first_lease = 6 + 4 * named_count
local wanted = #ARGV - first_lease + 1
local now = tonumber(ARGV[1])
local time = redis.call('TIME')
local server_now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local due = math.min(now, server_now)
-- A waiting entry's score: (9 - priority) * SPAN + its ready score (ms below 2^42).
local SPAN = 4398046511104
-- How far apart (ms) the clocks of two callers may be for rate windows to hold.
local SKEW = 1000
-- Entries set aside per call at most, so that one call never blocks Redis for long.
local MAX_SET_ASIDE = 1000

local function fields(desc)
  return string.match(desc, '^([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)$')
end

-- The enforced value of a limit: a named limit of the key wins over the entry's own.
local function allowed(kind, key, own, own_per)
  local n = named[key]
  if n and kind == 'c' and n[1] ~= '' then return tonumber(n[1]), nil end
  if n and kind == 'r' and n[2] ~= '' then return tonumber(n[2]), tonumber(n[3]) end
  if own == '' then return nil, nil end
  if own_per == '' then return tonumber(own), nil end
  return tonumber(own), tonumber(own_per)
end

-- A rebuild closes the limits of the entries it loads for a while (lim:closed:<member>
-- holds until when): the starts of a rate window, and leases taken as Redis lost its
-- data but recorded in the log only after the rebuild read it, are unknown.
local function closed_until(member)
  local closed = tonumber(redis.call('GET', base .. ':lim:closed:' .. member) or -1)
  if closed >= now then return closed end
  return nil
end

local function used(kind, key, per)
  if closed_until(kind .. ':' .. key) then return math.huge end
  if kind == 'c' then
    return redis.call('SCARD', base .. ':lim:run:' .. key)
  end
  -- Starts after ``now`` count too, and a second more than the window is kept: the
  -- callers' clocks (the times leases record) may differ a little, and a window must
  -- hold at most the limit whichever caller's time it is seen by.
  local starts = base .. ':lim:starts:' .. key
  redis.call('ZREMRANGEBYSCORE', starts, '-inf', '(' .. (now - per - SKEW))
  return redis.call('ZCOUNT', starts, now - per, now + per)
end

-- When a full limit next has room by itself (nil: when a slot frees).
local function next_room(kind, key, per)
  local closed = closed_until(kind .. ':' .. key)
  if closed then return closed + 1 end
  if kind == 'c' then return nil end
  local first = redis.call(
    'ZRANGEBYSCORE', base .. ':lim:starts:' .. key, now - per, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return tonumber(first[2] or now) + per + 1
end

-- Moves as many waiting entries of ``member`` back to their ready sets as it has room.
local function wake(member)
  local kind, key = string.sub(member, 1, 1), string.sub(member, 3)
  local vals = redis.call('HGET', KEYS[18], member) or '|'
  local own, own_per = string.match(vals, '^([^|]*)|([^|]*)$')
  local limit, per = allowed(kind, key, own, own_per)
  local room = MAX_SET_ASIDE
  if limit then room = math.min(room, limit - used(kind, key, per)) end
  local wait = base .. ':lim:wait:' .. member
  if room > 0 then
    local popped = redis.call('ZPOPMIN', wait, room)
    for i = 1, #popped, 2 do
      local score = tonumber(popped[i + 1])
      local band = math.floor(score / SPAN)
      redis.call('ZADD', KEYS[10 - band], score - band * SPAN, popped[i])
    end
  end
  if redis.call('EXISTS', wait) == 0 then return end
  -- Entries are left waiting: a rate window's next room, or (without a value, more
  -- than one round moves) at once; a concurrency key's freed slot wakes it anyway.
  local at = next_room(kind, key, per)
  if not limit then at = 0 end
  if at then redis.call('ZADD', KEYS[16], 'LT', at, member) end
end

for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[16], '-inf', due)) do
  redis.call('ZREM', KEYS[16], member)
  wake(member)
end

-- The limit an entry is over ('c:<key>' or 'r:<key>', and when to look again), or nil;
-- and its keys, to count the lease against.
-- A queue none of whose entries has limits skips the per-entry lookup altogether.
local limited = redis.call('EXISTS', KEYS[15]) == 1

local function over(id)
  if not limited then return nil end
  local desc = redis.call('HGET', KEYS[15], id)
  if not desc then return nil end
  local ckey, cmax, rkey, rlimit, rper = fields(desc)
  if ckey ~= '' then
    local limit = allowed('c', ckey, cmax, '')
    redis.call('HSET', KEYS[18], 'c:' .. ckey, cmax .. '|')
    if limit and used('c', ckey) >= limit then return 'c:' .. ckey, next_room('c', ckey) end
  end
  if rkey ~= '' then
    local limit, per = allowed('r', rkey, rlimit, rper)
    redis.call('HSET', KEYS[18], 'r:' .. rkey, rlimit .. '|' .. rper)
    if limit then
      if used('r', rkey, per) >= limit then
        return 'r:' .. rkey, next_room('r', rkey, per)
      end
      return nil, nil, ckey, rkey
    end
  end
  return nil, nil, ckey, ''
end

local out, taken, aside, throttled = {0}, 0, 0, {}

local function set_aside(id, priority, score, member, wake_at)
  redis.call('ZREM', KEYS[priority + 1], id)
  -- A ready time before 1970 would leave its band: it waits as if it were 1970.
  local ordered = (9 - priority) * SPAN + math.max(score, 0)
  redis.call('ZADD', base .. ':lim:wait:' .. member, ordered, id)
  if wake_at then redis.call('ZADD', KEYS[16], 'LT', wake_at, member) end
  aside = aside + 1
  if redis.call('HSETNX', KEYS[17], id, '1') == 1 then
    throttled[#throttled + 1] = id
    throttled[#throttled + 1] = string.sub(member, 1, 1)
    throttled[#throttled + 1] = string.sub(member, 3)
  end
end

local function take(id, priority, ckey, rkey)
  taken = taken + 1
  local lease_id = ARGV[first_lease + taken - 1]
  redis.call('ZREM', KEYS[priority + 1], id)
  redis.call('ZADD', KEYS[11], ARGV[2], id)
  redis.call('HSET', KEYS[13], id, priority .. '|' .. lease_id .. '|' .. ARGV[3])
  if ckey and ckey ~= '' then redis.call('SADD', base .. ':lim:run:' .. ckey, id) end
  if rkey and rkey ~= '' then redis.call('ZADD', base .. ':lim:starts:' .. rkey, now, lease_id) end
  -- The caller reads attempt, version and spec from the item; Lua never decodes it.
  out[#out + 1] = id
  out[#out + 1] = lease_id
  out[#out + 1] = redis.call('HGET', KEYS[12], id)
end

for priority = 9, 0, -1 do
  local ready = KEYS[priority + 1]
  while taken < wanted and aside < MAX_SET_ASIDE do
    local batch = redis.call(
      'ZRANGEBYSCORE', ready, '-inf', due, 'WITHSCORES', 'LIMIT', 0, wanted - taken)
    if #batch == 0 then break end
    for i = 1, #batch, 2 do
      local id = batch[i]
      local member, wake_at, ckey, rkey = over(id)
      if member then
        set_aside(id, priority, tonumber(batch[i + 1]), member, wake_at)
      else
        take(id, priority, ckey, rkey)
      end
    end
  end
  if taken == wanted or aside >= MAX_SET_ASIDE then break end
end

out[1] = taken
for _, value in ipairs(throttled) do out[#out + 1] = value end
return out
