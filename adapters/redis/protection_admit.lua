-- Admits requests to one subscription (ports.Protection.Admit): for each,
-- the circuit breaker, the rate limit and the semaphore, with exactly the
-- answers and effects of domain.Breaker.Allow, go-redis/redis_rate's GCRA
-- script and a lease set taking a slot run one after the other, the requests in
-- order, at one instant, but for one: expired leases are swept only when
-- the set has no room for the requests without it (see below). An Admit alone is a call of one request; the group commit of
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

-- The breaker and the rate limit's arrival time, read together.
local stored = redis.call('MGET', KEYS[1], KEYS[2])

-- The breaker. A closed breaker's Allow changes nothing and lets the
-- request through, whatever its failure count: the only transition Lua
-- needs to know. The encoding is encodeBreaker's: no key, or "c:..." when
-- closed.
local breaker = stored[1]
local closed = not breaker or string.sub(breaker, 1, 2) == 'c:'

-- The rate limit: redis_rate v10's allowN with cost 1, on the same key and
-- with the same arithmetic;
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
local tat = stored[2]
if tat then
  tat = tonumber(tat)
end
local stored_tat, stored_ex

-- First the breaker and the rate limit, for every request in order: what
-- they decide does not depend on the semaphore's answer (a request the
-- semaphore refuses stays taken from the budget), so asking the semaphore
-- afterwards, in the same order, answers as asking all three per request.
local out = {}
local holders, ttls, waiting = {}, {}, {}
for i = 5, #ARGV, 3 do
  local holder, ttl, passed = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  if passed ~= '1' and not closed then
    out[#out + 1] = {0, breaker}
  else
    local new_tat = math.max(tat or now, now) + increment
    local diff = now - (new_tat - burst_offset)
    if diff / emission_interval < 0 then
      out[#out + 1] = {2, tostring(diff * -1)}
    else
      local reset_after = new_tat - now
      if reset_after > 0 then
        tat, stored_tat, stored_ex = new_tat, new_tat, math.ceil(reset_after)
      end
      out[#out + 1] = false -- the semaphore's to answer
      waiting[#waiting + 1] = #out
      holders[#holders + 1] = holder
      ttls[#ttls + 1] = ttl
    end
  end
end

if stored_tat then
  redis.call('SET', KEYS[2], stored_tat, 'EX', stored_ex)
end
if #waiting == 0 then
  return out
end

-- The semaphore (semaphore.lua), the count kept here between requests.
-- When the set, expired leases and all, has room for every request
-- waiting, each gets a slot whether or not it holds one already: one ZADD
-- for all, without sweeping the expired leases, which only a full set
-- needs gone. Otherwise the set is swept and counted, and each request in
-- order takes its slot again or a free one.
local key = KEYS[3]
local limit = tonumber(ARGV[4])
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local count = redis.call('ZCARD', key)
local added = false
if count + #waiting <= limit then
  -- In ZADDs of at most 500 leases: unpack's results must fit Lua's stack.
  local zadd = {}
  for j = 1, #waiting do
    zadd[#zadd + 1] = string.format('%d', now_ms + ttls[j]) -- not %.17g
    zadd[#zadd + 1] = holders[j]
    out[waiting[j]] = {1}
    if #zadd == 1000 or j == #waiting then
      redis.call('ZADD', key, unpack(zadd))
      zadd = {}
    end
  end
  added = true
else
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
  count = redis.call('ZCARD', key)
  for j = 1, #waiting do
    local holder = holders[j]
    local held = redis.call('ZSCORE', key, holder)
    if not held and count >= limit then
      out[waiting[j]] = {3}
    else
      redis.call('ZADD', key, now_ms + ttls[j], holder)
      if not held then
        count = count + 1
      end
      added = true
      out[waiting[j]] = {1}
    end
  end
end

if added then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, last[2])
end
return out
