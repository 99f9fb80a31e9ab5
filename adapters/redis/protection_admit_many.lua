-- Admits several requests to one subscription (ports.Protection.Admit for
-- each), with exactly the effects of protection_admit.lua run once per
-- request, in order, at one instant: the group commit of concurrent Admits
-- (see protectionScript) sends the runs of one subscription with the same
-- limits here, so that the breaker, the rate limit's arrival time and the
-- lease set are read and written once for all of them instead of once each.
-- KEYS as protection_admit.lua's.
-- ARGV[1]: burst; ARGV[2]: rate; ARGV[3]: period in s; ARGV[4]: slot limit;
-- then, for each request, three: holder, lease ttl in ms, and "1" when the
-- caller already passed the breaker.
-- Returns one reply per request, as protection_admit.lua's.
redis.replicate_commands()

local t = redis.call('TIME')

local breaker = redis.call('GET', KEYS[1])
local closed = not breaker or string.sub(breaker, 1, 2) == 'c:'

-- The rate limit, as in protection_admit.lua (a script cannot call
-- another, so the arithmetic is repeated; TestAdmitManyMatchesSingleRuns
-- keeps the two in step), with the arrival time kept here between
-- requests and stored once at the end.
local burst = ARGV[1]
local rate = ARGV[2]
local period = ARGV[3]
local emission_interval = period / rate
local increment = emission_interval
local burst_offset = emission_interval * burst
local jan_1_2017 = 1483228800
local now = (t[1] - jan_1_2017) + (t[2] / 1000000)
local tat = redis.call('GET', KEYS[2])
if tat then
  tat = tonumber(tat)
end
local stored_tat, stored_ex

-- The semaphore, with the count of holders kept here between requests.
local key = KEYS[3]
local limit = tonumber(ARGV[4])
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local count
local added = false

local out = {}
for i = 5, #ARGV, 3 do
  local holder, ttl, passed = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local reply
  if passed ~= '1' and not closed then
    reply = {0, breaker}
  else
    local new_tat = math.max(tat or now, now) + increment
    local diff = now - (new_tat - burst_offset)
    if diff / emission_interval < 0 then
      reply = {2, tostring(diff * -1)}
    else
      local reset_after = new_tat - now
      if reset_after > 0 then
        tat, stored_tat, stored_ex = new_tat, new_tat, math.ceil(reset_after)
      end
      if not count then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
        count = redis.call('ZCARD', key)
      end
      local held = redis.call('ZSCORE', key, holder)
      if not held and count >= limit then
        reply = {3}
      else
        redis.call('ZADD', key, now_ms + ttl, holder)
        if not held then
          count = count + 1
        end
        added = true
        reply = {1}
      end
    end
  end
  out[#out + 1] = reply
end

if stored_tat then
  redis.call('SET', KEYS[2], stored_tat, 'EX', stored_ex)
end
if added then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, last[2])
end
return out
