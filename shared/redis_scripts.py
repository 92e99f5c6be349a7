"""The Redis store's server-side scripts: each write is one atomic step.

A task is a hash (`doc`: the JSON snapshot; `seq`: its last event's
number; `base`: the event the snapshot includes; `state`; `mkey`: the
message key that created it), a tail string (the events since the
snapshot, one JSON per line), a stream (the event log, entry ids `0-<seq>`)
and its entries in the time indexes. The scripts compare `seq` and never
decode a task, so a change costs the same for a tiny task and a huge one.
"""

from __future__ import annotations

from typing import Final

# KEYS: task, tail, log, message key (or a placeholder), context key, waiting index
# ARGV: snapshot, first event, task id, now, owner, has message key ("1"/"0"),
#       key prefix, channel, log limit, the task id the key may be moved from ("")
CREATE: Final = """
if ARGV[6] == '1' then
  local earlier = redis.call('GET', KEYS[4])
  if earlier and earlier ~= ARGV[10]
      and redis.call('EXISTS', ARGV[7] .. 'task:' .. earlier) == 1 then
    return {'existing', earlier}
  end
end
local owner = redis.call('GET', KEYS[5])
if owner and owner ~= ARGV[5] then return {'context', ''} end
if not owner then redis.call('SET', KEYS[5], ARGV[5]) end
local mkey = ''
if ARGV[6] == '1' then
  mkey = KEYS[4]
  redis.call('SET', KEYS[4], ARGV[3])
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'seq', 1, 'base', 1, 'state', 'submitted', 'mkey', mkey)
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[9], '0-1', 'e', ARGV[2])
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[3])
redis.call('PUBLISH', ARGV[8], ARGV[3])
return {'created', ARGV[3]}
"""

# KEYS: task, tail, log, working index, waiting index
# ARGV: expected seq ('' = overwrite whatever is there: `save`), snapshot
#       ('' = append to the tail only), new state, now, ttl seconds (0 = keep),
#       task id, channel, log limit, then one JSON event per argument
COMMIT: Final = """
local seq
if ARGV[1] == '' then
  if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then redis.call('DEL', KEYS[1]) end
  seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
else
  seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '-1')
  if seq ~= tonumber(ARGV[1]) then return 0 end
end
local first = 9
for i = first, #ARGV do
  seq = seq + 1
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '0-' .. seq, 'e', ARGV[i])
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'seq', seq, 'base', seq, 'state', ARGV[3])
  redis.call('DEL', KEYS[2])
else
  redis.call('HSET', KEYS[1], 'seq', seq, 'state', ARGV[3])
  for i = first, #ARGV do redis.call('APPEND', KEYS[2], ARGV[i] .. '\\n') end
end
if ARGV[3] == 'working' then
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[6])
else
  redis.call('ZREM', KEYS[4], ARGV[6])
end
if ARGV[3] == 'submitted' then
  redis.call('ZADD', KEYS[5], ARGV[4], ARGV[6])
else
  redis.call('ZREM', KEYS[5], ARGV[6])
end
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ttl) end
  local mkey = redis.call('HGET', KEYS[1], 'mkey')
  if mkey and mkey ~= '' then redis.call('EXPIRE', mkey, ttl) end
end
redis.call('PUBLISH', ARGV[7], ARGV[6])
return 1
"""
