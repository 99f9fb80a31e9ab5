-- Stores a subscription's breaker if nobody changed it since it was read
-- (compare-and-set; breakerStore.updateFrom): the transition is computed in Go by
-- domain.Breaker, Redis only checks and stores, in one round trip instead
-- of WATCH, GET, MULTI ... EXEC.
-- KEYS[1]: the breaker's key.
-- ARGV[1]: the value the caller read ("" for no key); ARGV[2]: the value
-- to store ("" deletes the key: closed with no failures); ARGV[3]: its TTL
-- in ms.
-- Returns {1, ""} when stored, {0, current value} when the key had changed.
local cur = redis.call('GET', KEYS[1]) or ''
if cur ~= ARGV[1] then
  return {0, cur}
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return {1, ''}
