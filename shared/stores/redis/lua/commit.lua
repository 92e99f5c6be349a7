--#include clock
--#include listed
-- KEYS: task, tail, log, the working time index, the waiting one, status
--       history, expiring index, the interrupted time index
-- ARGV: expected seq ('' = overwrite whatever is there: `save`), snapshot
--       ('' = append to the tail only), new state, now, ttl seconds (0 = keep),
--       task id, channel, log limit, key prefix, status time, owner digest,
--       context digest, the context id as JSON, the task's generation after
--       the events ('' = none kept), the time index the task is now in
--       ('' = none), then one JSON event per argument
-- Returns 1 when written, 0 when `seq` is not the expected one (or the
-- events must be stamped again, see append.lua).
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
for i = 16, #ARGV do events[#events + 1] = ARGV[i] end
local generation, entered, redo = ARGV[14], ARGV[15], 0
--#include append
return 1
