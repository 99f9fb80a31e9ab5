-- Ends a request (ports.Protection.Finish): gives its slot back and, when
-- that is all the breaker needs, records its result, in one round trip.
-- KEYS[1]: the sorted set of leases; KEYS[2]: the breaker (one hash tag).
-- ARGV[1]: holder; ARGV[2]: "1" for a success, "0" for a failure.
-- Returns {1} when the result is recorded: a success on a closed breaker,
-- which closed with no failures is no key (encodeBreaker); or {0, breaker}
-- (the stored value, "" for none) when the transition needs domain.Breaker:
-- the caller computes it in Go and stores it with breaker_swap.lua.
redis.call('ZREM', KEYS[1], ARGV[1])
local breaker = redis.call('GET', KEYS[2])
if ARGV[2] == '1' and (not breaker or string.sub(breaker, 1, 2) == 'c:') then
  if breaker then
    redis.call('DEL', KEYS[2])
  end
  return {1}
end
return {0, breaker or ''}
