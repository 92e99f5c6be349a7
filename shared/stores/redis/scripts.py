"""The Redis store's server-side scripts: each write is one atomic step.

A task is a hash (`doc`: the JSON snapshot; `seq`: its last event's
number; `base`: the event the snapshot includes; `state` and `ts` (its
status time, seconds since the epoch); `o` and `c`: digests of its owner
and context; `cj`: its contextId as JSON; `mkey`: the message key that
created it), a tail string (the
events since the snapshot, one JSON per line), a stream (the event log,
entry ids `0-<seq>`), a list of its status changes (`hist`: "ts|state",
for listings that hold still, see `shared.listing`) and its entries in the
indexes: the time indexes of working and waiting tasks, and the listing
indexes of its owner (all, per context, per state) scored by status time.
The scripts compare `seq` and never decode a task, so a change costs the
same for a tiny task and a huge one.

Event numbers are never reused, even by a Redis that lost its last writes
(AOF `everysec`: about a second; a restore from an older snapshot: more).
The hash records (`run`) which run of redis-server last wrote it; the first
write by another run cannot know whether numbers after `seq` were handed
out and lost, so it numbers on from the server's clock in microseconds
(above any number the lost writes could have used: no task gets an event
per microsecond), a new lineage. A reader holding a number from before
finds the numbers jump and reads the task instead (`shared.following`).
Asking for the run (INFO) costs more than the rest of a write, so it is
asked only when LASTSAVE (set at start, and by each snapshot) differs from
the one the task's last write saw (`ls`), or that write (`lw`, microseconds)
came within a second of it, too close to tell a run from the one before.
"""

from __future__ import annotations

from typing import Final

from shared.listing import WINDOW

# This run of redis-server (its run_id changes at every start), in Lua.
_RUN: Final = "string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')"
# The clock in microseconds, in Lua.
_NOW: Final = (
    "(function(t) return tonumber(t[1]) * 1000000 + tonumber(t[2]) end)(redis.call('TIME'))"
)

# KEYS: task, tail, log, message key (or a placeholder), context key, waiting
#       index, status history
# ARGV: snapshot, first event, task id, now, owner, has message key ("1"/"0"),
#       key prefix, channel, log limit, the task id the key may be moved from
#       (""), status time, owner digest, context digest, the context id as JSON
CREATE: Final = f"""
if ARGV[6] == '1' then
  local earlier = redis.call('GET', KEYS[4])
  if earlier and earlier ~= ARGV[10]
      and redis.call('EXISTS', ARGV[7] .. 'task:' .. earlier) == 1 then
    return {{'existing', earlier}}
  end
end
local owner = redis.call('GET', KEYS[5])
if owner and owner ~= ARGV[5] then return {{'context', ''}} end
-- A context's owner record is kept while a task in it lives (see COMMIT).
if owner then redis.call('PERSIST', KEYS[5]) else redis.call('SET', KEYS[5], ARGV[5]) end
local mkey = ''
if ARGV[6] == '1' then
  mkey = KEYS[4]
  redis.call('SET', KEYS[4], ARGV[3])
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[7])
redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'seq', 1, 'base', 1, 'state', 'submitted',
  'mkey', mkey, 'ts', ARGV[11], 'o', ARGV[12], 'c', ARGV[13], 'cj', ARGV[14],
  'run', {_RUN}, 'ls', redis.call('LASTSAVE'), 'lw', {_NOW})
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[9], '0-1', 'e', ARGV[2])
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[3])
redis.call('RPUSH', KEYS[7], ARGV[11] .. '|submitted')
local listed = ARGV[7] .. 'lidx:' .. ARGV[12]
redis.call('ZADD', listed, ARGV[11], ARGV[3])
redis.call('ZADD', listed .. ':ctx:' .. ARGV[13], ARGV[11], ARGV[3])
redis.call('ZADD', listed .. ':state:submitted', ARGV[11], ARGV[3])
redis.call('PUBLISH', ARGV[8], ARGV[3] .. ' 1')
return {{'created', ARGV[3]}}
"""

# What COMMIT and CLAIM do once they decided to write: append the events
# (the Lua table `events`) after `seq`, write the snapshot (ARGV[2]; '' =
# append to the tail only) and keep every index in step with the new state,
# filed under the digests `owner` and `context_digest`. KEYS and
# ARGV[2..10] as COMMIT's.
_APPEND: Final = f"""
local state, ts, id = ARGV[3], ARGV[10], ARGV[6]
local was = redis.call('HMGET', KEYS[1], 'state', 'ts', 'ls', 'lw')
local saved, now = redis.call('LASTSAVE'), {_NOW}
if tonumber(was[3]) ~= saved or tonumber(was[4]) < (saved + 1) * 1000000 then
  local run = {_RUN}
  if redis.call('HGET', KEYS[1], 'run') ~= run then
    -- Another run of redis-server wrote this task last: a new lineage.
    if seq > 0 then seq = math.max(seq, now) end
    redis.call('HSET', KEYS[1], 'run', run)
  end
end
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
  for _, event in ipairs(events) do redis.call('APPEND', KEYS[2], event .. '\\n') end
end
if was[1] ~= state or was[2] ~= ts then
  redis.call('HSET', KEYS[1], 'state', state, 'ts', ts, 'o', owner, 'c', context_digest)
  local listed = ARGV[9] .. 'lidx:' .. owner
  redis.call('ZADD', listed, ts, id)
  redis.call('ZADD', listed .. ':ctx:' .. context_digest, ts, id)
  if was[1] and was[1] ~= state then redis.call('ZREM', listed .. ':state:' .. was[1], id) end
  redis.call('ZADD', listed .. ':state:' .. state, ts, id)
  redis.call('RPUSH', KEYS[6], ts .. '|' .. state)
  -- Changes older than the listing window go, but the last of them stays.
  for _ = 1, 2 do
    local second = redis.call('LINDEX', KEYS[6], 1)
    if not second or tonumber(string.match(second, '^[^|]*')) >= tonumber(ARGV[4]) - {WINDOW} then
      break
    end
    redis.call('LPOP', KEYS[6])
  end
end
if state == 'working' then
  redis.call('ZADD', KEYS[4], ARGV[4], id)
else
  redis.call('ZREM', KEYS[4], id)
end
if state == 'submitted' then
  redis.call('ZADD', KEYS[5], ARGV[4], id)
else
  redis.call('ZREM', KEYS[5], id)
end
if state == 'input-required' or state == 'auth-required' then
  redis.call('ZADD', KEYS[8], ARGV[4], id)
else
  redis.call('ZREM', KEYS[8], id)
end
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ttl) end
  redis.call('EXPIRE', KEYS[6], ttl)
  local mkey = redis.call('HGET', KEYS[1], 'mkey')
  if mkey and mkey ~= '' then redis.call('EXPIRE', mkey, ttl) end
  local member = id .. '|' .. owner .. '|' .. context_digest .. '|' .. state
  redis.call('ZADD', KEYS[7], tonumber(ARGV[4]) + ttl, member)
  -- The context's owner record goes with the last of its finished tasks
  -- (a later task in the context makes it lasting again, in CREATE).
  local context = ARGV[9] .. 'ctx:' .. context_digest
  local left = redis.call('TTL', context)
  if left == -1 or (left >= 0 and left < ttl) then redis.call('EXPIRE', context, ttl) end
end
redis.call('PUBLISH', ARGV[7], id .. ' ' .. string.format('%.0f', seq))
"""

# KEYS: task, tail, log, working index, waiting index, status history,
#       expiring index, interrupted index
# ARGV: expected seq ('' = overwrite whatever is there: `save`), snapshot
#       ('' = append to the tail only), new state, now, ttl seconds (0 = keep),
#       task id, channel, log limit, key prefix, status time, owner digest,
#       context digest, the context id as JSON, then one JSON event per argument
COMMIT: Final = f"""
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
local events = {{}}
for i = 14, #ARGV do events[#events + 1] = ARGV[i] end
{_APPEND}
return 1
"""

# The worker's claim in one step: if the task is in the expected state, its
# status update is appended (made here from the two halves of the event
# around the context id, which the task records as JSON at creation) and the
# task is returned as the claim left it; otherwise as it stands.
# KEYS: as COMMIT's. ARGV: expected state, '' (no snapshot), then ARGV[3..10]
# as COMMIT's, two unused, then the event's text before and after its
# context id.
# Returns {outcome, doc, seq, tail}: outcome 'claimed', 'refused', 'unknown',
# or 'unsupported' (a task saved before contexts were recorded).
CLAIM: Final = f"""
local found = redis.call('HMGET', KEYS[1], 'state', 'seq', 'doc', 'cj', 'o', 'c')
if not found[3] or not found[2] then return {{'unknown'}} end
if found[1] == ARGV[1] and found[4] then
  local owner, context_digest = found[5], found[6]
  local seq = tonumber(found[2])
  local events = {{ARGV[13] .. found[4] .. ARGV[14]}}
  {_APPEND}
  local now = redis.call('HMGET', KEYS[1], 'doc', 'seq')
  return {{'claimed', now[1], now[2], redis.call('GET', KEYS[2])}}
end
local outcome = 'refused'
if found[1] == ARGV[1] then outcome = 'unsupported' end
return {{outcome, found[3], found[2], redis.call('GET', KEYS[2])}}
"""

# One task, as one reply: its snapshot, event number and tail, read together
# (a snapshot rewritten between two separate reads would lose events).
# KEYS: task, tail. A key of the wrong type is an error (unreadable data).
READ: Final = """
local found = redis.call('HMGET', KEYS[1], 'doc', 'seq')
return {found[1], found[2], redis.call('GET', KEYS[2])}
"""

# Listing entries of tasks that expired. KEYS: expiring index.
# ARGV: now, key prefix. Returns how many were removed.
FORGET_EXPIRED: Final = """
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1000)
for _, member in ipairs(gone) do
  local id, owner, context, state = member:match('^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if not id then
    redis.call('ZREM', KEYS[1], member)
  elseif redis.call('EXISTS', ARGV[2] .. 'task:' .. id) == 0 then
    local listed = ARGV[2] .. 'lidx:' .. owner
    redis.call('ZREM', listed, id)
    redis.call('ZREM', listed .. ':ctx:' .. context, id)
    redis.call('ZREM', listed .. ':state:' .. state, id)
    redis.call('ZREM', KEYS[1], member)
  end
end
return #gone
"""
