-- Spend ARGV[2] units from every budget in KEYS, or from none (runtime/budgets.py's
-- spend, for each key). Each key holds the budget's TAT in microseconds.
-- ARGV: now (us), cost, then per key: interval (us), window (us), limit.
-- Returns {allowed, limit, remaining, reset (us), retry after (us), refused key (1-based, 0)}
-- of the first refusal that waits longest, else of the budget with the least left.
local now = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local afters = {}
local pick = nil
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[3 * i])
  local window = tonumber(ARGV[3 * i + 1])
  local limit = tonumber(ARGV[3 * i + 2])
  local base = math.max(tonumber(redis.call('GET', key) or '0'), now)
  local after = base + cost * interval
  local found
  if after - window > now then
    local left = math.max(0, math.floor((window - (base - now)) / interval))
    found = {0, limit, left, base - now, after - window - now, i}
  else
    afters[i] = after
    found = {1, limit, math.floor((window - (after - now)) / interval), after - now, 0, 0}
  end
  if pick == nil then
    pick = found
  elseif found[1] == 0 then
    if pick[1] == 1 or found[5] > pick[5] then pick = found end
  elseif pick[1] == 1 then
    if found[3] < pick[3] or (found[3] == pick[3] and found[4] > pick[4]) then pick = found end
  end
end
if pick[1] == 1 then
  for i, key in ipairs(KEYS) do
    local ttl = math.floor((afters[i] - now) / 1000) + 1
    redis.call('SET', key, string.format('%.0f', afters[i]), 'PX', ttl)
  end
end
return pick
