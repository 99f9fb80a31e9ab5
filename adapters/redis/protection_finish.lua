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
local replies = {}
for i = 1, #ARGV, 2 do
  redis.call('ZREM', KEYS[1], ARGV[i])
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
