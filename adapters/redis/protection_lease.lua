-- Leases a worker a share of one subscription's protections
-- (LeasedProtection): requests from the rate limit's budget, and the slots
-- of its semaphore those need beyond the ones the worker holds free, which
-- the worker then hands to its deliveries without asking Redis again.
-- KEYS[1]: the breaker; KEYS[2]: the rate limit's theoretical arrival time;
-- KEYS[3]: the sorted set of leases (the keys of protection_admit.lua).
-- ARGV[1]: burst; ARGV[2]: rate; ARGV[3]: period in s (as redis_rate);
-- ARGV[4]: slot limit; ARGV[5]: the new slots' lease ttl in ms; ARGV[6]:
-- how many requests are wanted; ARGV[7]: how many new slots are wanted at
-- most; ARGV[8]: how many free slots the worker holds; ARGV[9]: the prefix of
-- the new slots' names and ARGV[10] the number of the first (slot i is
-- ARGV[9] .. ARGV[10] + i); then the slots the worker gives back.
-- Returns:
--   {1, n, added}           n requests leased (1 <= n <= wanted), taken
--                           from the budget, and added new slots held
--                           (0 <= added <= wanted); the worker has a slot:
--                           a free one, or a new one;
--   {0, breaker}            a breaker is stored (closed with failures, open
--                           or half-open): nothing leased, the caller asks
--                           request by request (protection_admit.lua),
--                           which counts every request's result;
--   {2, retry after in s}   the budget has no request left;
--   {3}                     every slot is taken and the worker holds none
--                           free: nothing taken.
-- The slots given back are given back in every case. The requests may
-- outnumber the slots: the worker's slots in use come back to it.
redis.replicate_commands()

local key = KEYS[3]
-- Give back first, in ZREMs of at most 1,000 (unpack's results must fit
-- Lua's stack).
local back = {}
for i = 11, #ARGV do
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

-- The semaphore: new slots for the requests leased that the worker's free
-- slots do not cover (not for those wanted: a budget nearly spent must not
-- have the slots of a whole lease taken for a request or two), as far as
-- the set has room, expired leases swept only when it has no room for all
-- of them (as protection_admit.lua).
local limit = tonumber(ARGV[4])
local wanted_slots = math.min(tonumber(ARGV[7]), math.max(0, n - tonumber(ARGV[8])))
local added = 0
if wanted_slots > 0 then
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local count = redis.call('ZCARD', key)
  if count + wanted_slots > limit then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
    count = redis.call('ZCARD', key)
  end
  added = math.max(0, math.min(wanted_slots, limit - count))
  -- Numbers formatted as integers once: a Lua number handed to
  -- redis.call, or joined to a string, is printed with %.17g (%.14g),
  -- which costs more than the ZADD.
  local expiry = string.format('%d', now_ms + tonumber(ARGV[5]))
  local prefix, first = ARGV[9], tonumber(ARGV[10])
  local zadd = {}
  for i = 0, added - 1 do
    zadd[#zadd + 1] = expiry
    zadd[#zadd + 1] = string.format('%s%d', prefix, first + i)
    if #zadd == 1000 or i == added - 1 then
      redis.call('ZADD', key, unpack(zadd))
      zadd = {}
    end
  end
  if added > 0 then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', key, last[2])
  end
end
if tonumber(ARGV[8]) + added < 1 then
  return {3}
end

local new_tat = tat + n * emission_interval
redis.call('SET', KEYS[2], new_tat, 'EX', math.ceil(new_tat - now))
return {1, n, added}
