-- Admits one request to a subscription (ports.Protection.Admit): the
-- circuit breaker, the rate limit and the semaphore in one round trip, with
-- exactly the effects of Breakers.Allow, RateLimiter.Take (redis_rate's
-- GCRA script) and semaphore.lua run one after the other.
-- KEYS[1]: the breaker; KEYS[2]: the rate limit's theoretical arrival time;
-- KEYS[3]: the sorted set of leases. All three share the hash tag {sub:<id>}.
-- ARGV[1]: burst; ARGV[2]: rate; ARGV[3]: period in s (as redis_rate);
-- ARGV[4]: holder; ARGV[5]: slot limit; ARGV[6]: lease ttl in ms;
-- ARGV[7]: "1" when the caller already passed the breaker (skip it).
-- Returns:
--   {1}                     admitted: a request taken, a slot held;
--   {0, breaker}            the breaker is not closed: nothing was done, the
--                           caller runs the breaker's transition in Go
--                           (domain.Breaker) and calls again with ARGV[7];
--   {2, retry after in s}   the rate limit refused: nothing taken;
--   {3}                     every slot is taken (the request stays taken
--                           from the budget, as after Take then TryAcquire).
redis.replicate_commands()

-- The breaker. A closed breaker's Allow changes nothing and lets the
-- request through, whatever its failure count: the only transition Lua
-- needs to know. The encoding is encodeBreaker's: no key, or "c:..." when
-- closed.
if ARGV[7] ~= '1' then
  local breaker = redis.call('GET', KEYS[1])
  if breaker and string.sub(breaker, 1, 2) ~= 'c:' then
    return {0, breaker}
  end
end

local t = redis.call('TIME')

-- The rate limit: redis_rate v10's allowN with cost 1, on the same key and
-- with the same arithmetic, so this and RateLimiter.Take share one budget.
local burst = ARGV[1]
local rate = ARGV[2]
local period = ARGV[3]
local emission_interval = period / rate
local increment = emission_interval
local burst_offset = emission_interval * burst
local jan_1_2017 = 1483228800
local now = (t[1] - jan_1_2017) + (t[2] / 1000000)
local tat = redis.call('GET', KEYS[2])
if not tat then
  tat = now
else
  tat = tonumber(tat)
end
tat = math.max(tat, now)
local new_tat = tat + increment
local allow_at = new_tat - burst_offset
local diff = now - allow_at
if diff / emission_interval < 0 then
  return {2, tostring(diff * -1)}
end
local reset_after = new_tat - now
if reset_after > 0 then
  redis.call('SET', KEYS[2], new_tat, 'EX', math.ceil(reset_after))
end

-- The semaphore: semaphore.lua.
local key = KEYS[3]
local holder = ARGV[4]
local limit = tonumber(ARGV[5])
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
if not redis.call('ZSCORE', key, holder) and redis.call('ZCARD', key) >= limit then
  return {3}
end
redis.call('ZADD', key, now_ms + tonumber(ARGV[6]), holder)
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', key, last[2])
return {1}
