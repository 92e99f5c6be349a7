--#include clock
--#include listed
-- KEYS: task, tail, log, message key (or a placeholder), context key, the
--       time index a submitted task is in ('' = none), status history
-- ARGV: snapshot, first event, task id, now, owner, has message key ("1"/"0"),
--       key prefix, channel, log limit, the task id the key may be moved from
--       (""), status time, owner digest, context digest, the context id as JSON
--       ('' for a task that waits for its context), the task's generation
--       ('' = none kept)
if ARGV[6] == '1' then
  local earlier = redis.call('GET', KEYS[4])
  if earlier and earlier ~= ARGV[10]
      and redis.call('EXISTS', ARGV[7] .. 'task:' .. earlier) == 1 then
    return {'existing', earlier}
  end
end
local owner = redis.call('GET', KEYS[5])
if owner and owner ~= ARGV[5] then return {'context', ''} end
-- A context's owner record is kept while a task in it lives (see append.lua):
-- `<context key>:live` holds its tasks not yet finished.
if owner then redis.call('PERSIST', KEYS[5]) else redis.call('SET', KEYS[5], ARGV[5]) end
redis.call('SADD', KEYS[5] .. ':live', ARGV[3])
local mkey = ''
if ARGV[6] == '1' then
  mkey = KEYS[4]
  redis.call('SET', KEYS[4], ARGV[3])
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[7])
local filed = filed_at(ARGV[7], ARGV[11])
redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'seq', 1, 'base', 1, 'state', 'submitted',
  'mkey', mkey, 'st', ARGV[11], 'ts', filed, 'o', ARGV[12], 'c', ARGV[13], 'cj', ARGV[14],
  'run', this_run(), 'ls', redis.call('LASTSAVE'), 'lw', now_us())
if ARGV[15] ~= '' then redis.call('HSET', KEYS[1], 'g', ARGV[15]) end
-- No context id to claim with: a task that waits for its context is claimed
-- by the caller's read and write instead (CLAIM answers 'unsupported').
if ARGV[14] == '' then redis.call('HDEL', KEYS[1], 'cj') end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[9], '0-1', 'e', ARGV[2])
if KEYS[6] ~= '' then redis.call('ZADD', KEYS[6], ARGV[4], ARGV[3]) end
redis.call('RPUSH', KEYS[7], filed .. '|submitted')
local listed = ARGV[7] .. 'lidx:' .. ARGV[12]
redis.call('ZADD', listed, filed, ARGV[3])
redis.call('ZADD', listed .. ':ctx:' .. ARGV[13], filed, ARGV[3])
redis.call('ZADD', listed .. ':state:submitted', filed, ARGV[3])
redis.call('PUBLISH', ARGV[8], ARGV[3] .. ' 1')
return {'created', ARGV[3]}
