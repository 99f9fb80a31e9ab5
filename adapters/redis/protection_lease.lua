-- Leases a worker a share of one subscription's protections
-- (LeasedProtection): up to a number of requests from the rate limit's
-- budget and as many slots of its semaphore, which the worker then hands
-- to its deliveries without asking Redis again.
-- KEYS[1]: the breaker; KEYS[2]: the rate limit's theoretical arrival time;
-- KEYS[3]: the sorted set of leases (the keys of protection_admit.lua).
-- ARGV[1]: burst; ARGV[2]: rate; ARGV[3]: period in s (as redis_rate);
-- ARGV[4]: slot limit; ARGV[5]: the slots' lease ttl in ms; ARGV[6]: how
-- many requests are wanted; ARGV[7]: the prefix of the slots' names and
-- ARGV[8] the number of the first (slot i is ARGV[7] .. ARGV[8] + i);
-- then the slots the worker gives back (it no longer uses them).
-- Returns:
--   {1, n}                  n requests leased (1 <= n <= wanted): n taken
--                           from the budget, n slots held;
--   {0, breaker}            a breaker is stored (closed with failures, open
--                           or half-open): nothing leased, the caller asks
--                           request by request (protection_admit.lua),
--                           which counts every request's result;
--   {2, retry after in s}   the budget has no request left;
--   {3}                     every slot is taken.
-- The slots given back are given back in every case. Nothing is taken
-- from the budget unless slots are too.
redis.replicate_commands()

local key = KEYS[3]
-- Give back first, in ZREMs of at most 1,000 (unpack's results must fit
-- Lua's stack).
local back = {}
for i = 9, #ARGV do
  back[#back + 1] = ARGV[i]
  if #back == 1000 or i == #ARGV then
    redis.call('ZREM', key, unpack(back))
    back = {}
  end
end

local t = redis.call('TIME')
local stored = redis.call('MGET', KEYS[1], KEYS[2])
if stored[1] then
  return {0, stored[1]}
end

-- The rate limit: redis_rate v10's allowN, asked for as many requests as
-- the budget holds now, up to the number wanted.
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local emission_interval = period / rate
local burst_offset = emission_interval * burst
local jan_1_2017 = 1483228800
local now = (t[1] - jan_1_2017) + (t[2] / 1000000)
local tat = math.max(tonumber(stored[2]) or now, now)
-- allowN(n) lets n through when now >= tat + n * interval - burst_offset.
local n = math.floor((now - tat + burst_offset) / emission_interval + 1e-9)
n = math.min(n, tonumber(ARGV[6]))
if n < 1 then
  return {2, tostring(tat + emission_interval - burst_offset - now)}
end

-- The semaphore: expired leases are swept only when the set has no room
-- for every request without it (as protection_admit.lua).
local limit = tonumber(ARGV[4])
local count = redis.call('ZCARD', key)
if count + n > limit then
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
  count = redis.call('ZCARD', key)
  n = math.min(n, limit - count)
  if n < 1 then
    return {3}
  end
end

local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Numbers formatted as integers once: a Lua number handed to redis.call,
-- or joined to a string, is printed with %.17g (%.14g), which costs more
-- than the ZADD.
local expiry = string.format('%d', now_ms + tonumber(ARGV[5]))
local prefix, first = ARGV[7], tonumber(ARGV[8])
local zadd = {}
for i = 0, n - 1 do
  zadd[#zadd + 1] = expiry
  zadd[#zadd + 1] = string.format('%s%d', prefix, first + i)
  if #zadd == 1000 or i == n - 1 then
    redis.call('ZADD', key, unpack(zadd))
    zadd = {}
  end
end
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', key, last[2])

local new_tat = tat + n * emission_interval
redis.call('SET', KEYS[2], new_tat, 'EX', math.ceil(new_tat - now))
return {1, n}
