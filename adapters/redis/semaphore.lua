-- Takes one of a subscription's in-flight slots (ports.Semaphore.TryAcquire).
-- KEYS[1]: the sorted set of leases, member = holder, score = lease expiry
--          in Unix ms by the Redis server's clock.
-- ARGV[1]: holder; ARGV[2]: limit; ARGV[3]: lease ttl in ms.
-- Returns 1 when holder has a slot (taken now, or renewed), 0 when all are
-- taken.
--
-- The clock is the server's TIME, not the caller's, so workers with skewed
-- clocks agree on when a lease ends. Redis 7 replicates a script's effects,
-- not the script, so a non-deterministic TIME before writes is allowed.
local key = KEYS[1]
local holder = ARGV[1]
local limit = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = now + ttl

-- A lease that ran out frees its slot (its holder died or overran).
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)

if not redis.call('ZSCORE', key, holder) and redis.call('ZCARD', key) >= limit then
  return 0
end
redis.call('ZADD', key, expiry, holder)

-- Keep the key until its longest lease ends, so an abandoned subscription's
-- key goes away by itself.
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', key, last[2])
return 1
