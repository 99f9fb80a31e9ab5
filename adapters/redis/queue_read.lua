-- Reads up to ARGV[3] new entries (0: no limit) for group ARGV[1] and
-- consumer ARGV[2] from the streams KEYS, in order, each asked only for
-- what is still missing: the sweep of Queue.Read on one Redis, one round
-- trip whatever the number of partitions. A stream without the group (or
-- without a stream) gets both, read from the start, as XGROUP CREATE ...
-- MKSTREAM would. Returns {{index of the key, 0-based, entries}, ...} for
-- the keys that had entries.
local group, consumer, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out, got = {}, 0
for i, key in ipairs(KEYS) do
  if count > 0 and got >= count then
    break
  end
  local args = {'XREADGROUP', 'GROUP', group, consumer}
  if count > 0 then
    args[#args + 1] = 'COUNT'
    args[#args + 1] = count - got
  end
  args[#args + 1] = 'STREAMS'
  args[#args + 1] = key
  args[#args + 1] = '>'
  local reply = redis.pcall(unpack(args))
  if type(reply) == 'table' and reply.err then
    if not string.find(reply.err, 'NOGROUP', 1, true) then
      return reply
    end
    redis.call('XGROUP', 'CREATE', key, group, '0', 'MKSTREAM')
    reply = redis.call(unpack(args))
  end
  if reply then
    local entries = reply[1][2]
    if #entries > 0 then
      out[#out + 1] = {i - 1, entries}
      got = got + #entries
    end
  end
end
return out
