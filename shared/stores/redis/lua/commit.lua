--#include clock
--#include listed
-- KEYS: task, tail, log, working index, waiting index, status history,
--       expiring index, interrupted index
-- ARGV: expected seq ('' = overwrite whatever is there: `save`), snapshot
--       ('' = append to the tail only), new state, now, ttl seconds (0 = keep),
--       task id, channel, log limit, key prefix, status time, owner digest,
--       context digest, the context id as JSON, then one JSON event per argument
local seq
if ARGV[1] == '' then
  if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then redis.call('DEL', KEYS[1]) end
  seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
  redis.call('HSET', KEYS[1], 'cj', ARGV[13])
else
  seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '-1')
  if seq ~= tonumber(ARGV[1]) then return 0 end
end
local owner, context_digest = ARGV[11], ARGV[12]
local events = {}
for i = 14, #ARGV do events[#events + 1] = ARGV[i] end
--#include append
return 1
