-- Admits requests to one subscription (ports.Protection.Admit): for each,
-- the circuit breaker, the rate limit and the semaphore, with exactly the
-- effects of Breakers.Allow, RateLimiter.Take (redis_rate's GCRA script)
-- and semaphore.lua run one after the other, the requests in order, at one
-- instant. An Admit alone is a call of one request; the group commit of
-- concurrent Admits (see protectionScript) sends those of one subscription
-- with the same limits in one call, which reads and writes the breaker,
-- the rate limit's arrival time and the lease set once for all of them.
-- KEYS[1]: the breaker; KEYS[2]: the rate limit's theoretical arrival time;
-- KEYS[3]: the sorted set of leases. All three share the hash tag {sub:<id>}.
-- ARGV[1]: burst; ARGV[2]: rate; ARGV[3]: period in s (as redis_rate);
-- ARGV[4]: slot limit; then, for each request, three: holder, lease ttl in
-- ms, and "1" when the caller already passed the breaker (skip it).
-- Returns one reply per request:
--   {1}                     admitted: a request taken, a slot held;
--   {0, breaker}            the breaker is not closed: nothing was done, the
--                           caller runs the breaker's transition in Go
--                           (domain.Breaker) and asks again, passing it;
--   {2, retry after in s}   the rate limit refused: nothing taken;
--   {3}                     every slot is taken (the request stays taken
--                           from the budget, as after Take then TryAcquire).
redis.replicate_commands()

local t = redis.call('TIME')

-- The breaker. A closed breaker's Allow changes nothing and lets the
-- request through, whatever its failure count: the only transition Lua
-- needs to know. The encoding is encodeBreaker's: no key, or "c:..." when
-- closed.
local breaker = redis.call('GET', KEYS[1])
local closed = not breaker or string.sub(breaker, 1, 2) == 'c:'

-- The rate limit: redis_rate v10's allowN with cost 1, on the same key and
-- with the same arithmetic, so this and RateLimiter.Take share one budget;
-- the arrival time is kept here between requests and stored once at the
-- end.
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

-- The semaphore (semaphore.lua), the set swept and counted once, the count
-- kept here between requests.
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
