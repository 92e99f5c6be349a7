-- What COMMIT and CLAIM do once they decided to write: append the events
-- (the Lua table `events`) after `seq`, write the snapshot (ARGV[2]; '' =
-- append to the tail only) and keep every index in step with the new state,
-- filed under the digests `owner` and `context_digest`; `generation` is the
-- task's after the events ('' = it keeps none); `entered` the key of the
-- time index the task is now in ('' = none; shared.store.time_indexes
-- decides). KEYS and ARGV[2..10] as COMMIT's. On the first write of a new lineage whose events carry a
-- generation, nothing is appended: the task's generation becomes unknown
-- ('g' = 0), the jump of its numbers is kept, and the script returns
-- `redo`, so the writer reads the task again and stamps its events anew.
local state, ts, id = ARGV[3], ARGV[10], ARGV[6]
-- 'st' is the status time as stamped, 'ts' where it is filed (see listed.lua);
-- a task written before 'st' was kept has only 'ts'.
local was = redis.call('HMGET', KEYS[1], 'state', 'st', 'ls', 'lw', 'ts')
local stamped = was[2] or was[5]
local saved, now = redis.call('LASTSAVE'), now_us()
if tonumber(was[3]) ~= saved or tonumber(was[4]) < (saved + 1) * 1000000 then
  local run = this_run()
  if redis.call('HGET', KEYS[1], 'run') ~= run then
    -- Another run of redis-server wrote this task last: a new lineage.
    if seq > 0 then seq = math.max(seq, now) end
    redis.call('HSET', KEYS[1], 'run', run)
    -- The lost writes may have taken generations a reader saw: the task
    -- says it has none from now on rather than repeat one.
    if seq > 0 and generation ~= '' and generation ~= '0' then
      redis.call('HSET', KEYS[1], 'seq', seq, 'g', '0')
      return redo
    end
  end
end
if generation ~= '' then redis.call('HSET', KEYS[1], 'g', generation) end
redis.call('HSET', KEYS[1], 'ls', saved, 'lw', now)
for _, event in ipairs(events) do
  seq = seq + 1
  -- (%.0f: Lua would write a number this large as 1.8e+15)
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], string.format('0-%.0f', seq), 'e', event)
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'seq', seq, 'base', seq)
  redis.call('DEL', KEYS[2])
else
  redis.call('HSET', KEYS[1], 'seq', seq)
  for _, event in ipairs(events) do redis.call('APPEND', KEYS[2], event .. '\n') end
end
if was[1] ~= state or stamped ~= ts then
  local filed = filed_at(ARGV[9], ts)
  redis.call('HSET', KEYS[1], 'state', state, 'st', ts, 'ts', filed, 'o', owner,
    'c', context_digest)
  local listed = ARGV[9] .. 'lidx:' .. owner
  redis.call('ZADD', listed, filed, id)
  redis.call('ZADD', listed .. ':ctx:' .. context_digest, filed, id)
  if was[1] and was[1] ~= state then redis.call('ZREM', listed .. ':state:' .. was[1], id) end
  redis.call('ZADD', listed .. ':state:' .. state, filed, id)
  redis.call('RPUSH', KEYS[6], filed .. '|' .. state)
  -- Changes older than the listing window go, but the last of them stays.
  for _ = 1, 2 do
    local second = redis.call('LINDEX', KEYS[6], 1)
    if not second or tonumber(string.match(second, '^[^|]*')) >= tonumber(ARGV[4]) - $WINDOW then
      break
    end
    redis.call('LPOP', KEYS[6])
  end
end
for _, index in ipairs({KEYS[4], KEYS[5], KEYS[8]}) do
  if index == entered then
    redis.call('ZADD', index, ARGV[4], id)
  else
    redis.call('ZREM', index, id)
  end
end
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ttl) end
  redis.call('EXPIRE', KEYS[6], ttl)
  local mkey = redis.call('HGET', KEYS[1], 'mkey')
  if mkey and mkey ~= '' then redis.call('EXPIRE', mkey, ttl) end
  local member = id .. '|' .. owner .. '|' .. context_digest .. '|' .. state
  redis.call('ZADD', KEYS[7], tonumber(ARGV[4]) + ttl, member)
  -- The context's owner record goes with the last task in it: it expires
  -- with the task that leaves none unfinished (a later task in the context
  -- makes it lasting again, in CREATE).
  local context = ARGV[9] .. 'ctx:' .. context_digest
  redis.call('SREM', context .. ':live', id)
  if redis.call('SCARD', context .. ':live') == 0 then
    local left = redis.call('TTL', context)
    if left == -1 or (left >= 0 and left < ttl) then redis.call('EXPIRE', context, ttl) end
  end
end
redis.call('PUBLISH', ARGV[7], id .. ' ' .. string.format('%.0f', seq))
