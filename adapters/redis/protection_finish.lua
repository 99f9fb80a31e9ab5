-- Ends requests to one subscription (ports.Protection.Finish): gives each
-- its slot back and, when that is all the breaker needs, records its
-- result, with exactly the effects of finishing them alone one after the
-- other. A Finish alone is a call of one request; the group commit of
-- concurrent Finishes (see protectionScript) sends those of one
-- subscription in one call.
-- KEYS[1]: the sorted set of leases; KEYS[2]: the breaker (one hash tag).
-- ARGV: for each request, two: holder, and "1" for a success, "0" for a
-- failure.
-- Returns one reply per request: {1} when its result is recorded, a
-- success on a closed breaker, which closed with no failures is no key
-- (encodeBreaker); or {0, breaker} (the stored value, "" for none) when
-- the transition needs domain.Breaker: the caller computes it in Go and
-- stores it with breaker_swap.lua. A failure leaves the breaker as it is,
-- so the breaker is read once.
local breaker = redis.call('GET', KEYS[2])
-- Every holder's slot back first, in ZREMs of at most 1,000 holders
-- (unpack's results must fit Lua's stack): the breaker's answers below do
-- not depend on the leases.
local holders = {}
for i = 1, #ARGV, 2 do
  holders[#holders + 1] = ARGV[i]
  if #holders == 1000 or i + 1 >= #ARGV then
    redis.call('ZREM', KEYS[1], unpack(holders))
    holders = {}
  end
end
local replies = {}
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '1' and (not breaker or string.sub(breaker, 1, 2) == 'c:') then
    if breaker then
      redis.call('DEL', KEYS[2])
      breaker = false
    end
    replies[#replies + 1] = {1}
  else
    replies[#replies + 1] = {0, breaker or ''}
  end
end
return replies
