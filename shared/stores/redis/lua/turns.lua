-- One step of the turn book (shared/owners/turns.py): hold tasks, release
-- tasks, then take into flight every held task whose turn has come.
-- Keys are made here from the book's prefix: per-owner lines are not known
-- before the script reads the book (the store runs on one Redis, or a
-- Sentinel-managed master, never a cluster).
-- ARGV: prefix, fair (1/0), floor, n, then n x (task, owner, priority,
--   weight, cap or ''), then m, then m task ids to release.
-- Returns the ids taken, in turn order, but for those whose message was kept
-- (`msg:<task>`, a hash: broker database d, queue q, message m, event channel
-- c, event a; put there by lua/create_held.lua): those are queued and
-- announced here, last (the script's own database changes for them), and an
-- including script gets their ids as a second value.
--
-- `owners` holds one entry per owner with held tasks, scored by its pass;
-- the entry is the arrival number of the owner's next task (16 digits)
-- followed by the owner (`entry` maps owner -> entry), so owners on equal
-- passes sort by whose next task came first, as TurnState's order does
-- (shared/owners/book.py), and a fair take reads the set from its head.
local p = ARGV[1]
local fair = ARGV[2] == '1'
local floor = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local where, held_at, owners, terms = p .. 'where', p .. 'held_at', p .. 'owners', p .. 'terms'
local flight, flight_at, running = p .. 'flight', p .. 'flight_at', p .. 'running'
local workers, slots, vtime, seq = p .. 'workers', p .. 'slots', p .. 'vtime', p .. 'seq'
local entry = p .. 'entry'
local span = 10000000000000
local digits = 16

-- The owner's entry placed again at `pass` (its next task may have changed),
-- or gone once the owner holds nothing.
local function place(owner, pass)
  local old = redis.call('HGET', entry, owner)
  if old then
    redis.call('ZREM', owners, old)
  end
  local first = redis.call('ZRANGE', p .. 'held:' .. owner, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('HDEL', entry, owner)
    return
  end
  local new = string.format('%016d', tonumber(first[2]) % span) .. owner
  redis.call('HSET', entry, owner, new)
  redis.call('ZADD', owners, string.format('%.17g', pass), new)
end

local function pass_of(owner)
  local old = redis.call('HGET', entry, owner)
  local score = old and redis.call('ZSCORE', owners, old)
  return tonumber(score or redis.call('GET', vtime) or '0')
end

local i = 5
for _ = 1, tonumber(ARGV[4]) do
  local task, owner, priority = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local weight, cap = ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  if redis.call('HEXISTS', where, task) == 0 and redis.call('HEXISTS', flight, task) == 0 then
    local number = redis.call('INCR', seq)
    local pass = pass_of(owner)
    redis.call('HSET', terms, owner, weight .. ' ' .. cap)
    redis.call('ZADD', p .. 'held:' .. owner, (10 - priority) * span + number, task)
    redis.call('HSET', where, task, owner)
    redis.call('ZADD', held_at, now, task)
    place(owner, pass)
  end
end

local released = tonumber(ARGV[i])
i = i + 1
for _ = 1, released do
  local task = ARGV[i]
  i = i + 1
  local owner = redis.call('HGET', flight, task)
  if owner then
    redis.call('HDEL', flight, task)
    redis.call('ZREM', flight_at, task)
    if redis.call('HINCRBY', running, owner, -1) <= 0 then
      redis.call('HDEL', running, owner)
    end
  end
  owner = redis.call('HGET', where, task)
  if owner then
    local pass = pass_of(owner)
    redis.call('DEL', p .. 'msg:' .. task)
    redis.call('HDEL', where, task)
    redis.call('ZREM', held_at, task)
    redis.call('ZREM', p .. 'held:' .. owner, task)
    place(owner, pass)
  end
end

-- The window: the live workers' slots and one message each, or the floor.
-- (A lapsed registration is dropped, and counted, by beat's sweep:
-- lua/turns_lapsed.lua.)
local live = redis.call('ZRANGEBYSCORE', workers, '(' .. now, '+inf')
local window = floor
if #live > 0 then
  window = #live
  for _, count in ipairs(redis.call('HMGET', slots, unpack(live))) do
    window = window + (tonumber(count) or 0)
  end
end
local room = window - redis.call('HLEN', flight)
if room <= 0 or redis.call('ZCARD', owners) == 0 then
  return {}, {}
end

local function terms_of(owner)
  local text = redis.call('HGET', terms, owner) or '1 '
  local space = string.find(text, ' ', 1, true)
  return tonumber(string.sub(text, 1, space - 1)), tonumber(string.sub(text, space + 1))
end

local function open(owner)
  local _, cap = terms_of(owner)
  return cap == nil or tonumber(redis.call('HGET', running, owner) or '0') < cap
end

local taken, kept, queued = {}, {}, {}
while room > 0 do
  -- Fair: the first open owner in the set's order (the lowest pass, then
  -- the earliest next task); else the open owner whose next task came first.
  -- Read a page at a time: a fair take stops at the first open owner.
  local pick, pass, earliest = nil, nil, nil
  local offset, done = 0, false
  while not done do
    local listed = redis.call('ZRANGE', owners, offset, offset + 63, 'WITHSCORES')
    if #listed == 0 then
      break
    end
    for k = 1, #listed, 2 do
      local owner = string.sub(listed[k], digits + 1)
      if open(owner) then
        local number = tonumber(string.sub(listed[k], 1, digits))
        if fair then
          pick, pass, done = owner, tonumber(listed[k + 1]), true
          break
        end
        if earliest == nil or number < earliest then
          earliest, pick, pass = number, owner, tonumber(listed[k + 1])
        end
      end
    end
    offset = offset + 64
  end
  if pick == nil then
    break
  end
  local task = redis.call('ZPOPMIN', p .. 'held:' .. pick)[1]
  redis.call('HDEL', where, task)
  redis.call('ZREM', held_at, task)
  redis.call('HSET', flight, task, pick)
  redis.call('ZADD', flight_at, now, task)
  redis.call('HINCRBY', running, pick, 1)
  redis.call('SET', vtime, string.format('%.17g', pass))
  local weight = terms_of(pick)
  place(pick, pass + 1 / weight)
  local message = redis.call('HMGET', p .. 'msg:' .. task, 'd', 'q', 'm', 'c', 'a')
  if message[3] then
    redis.call('DEL', p .. 'msg:' .. task)
    kept[#kept + 1] = message
    queued[#queued + 1] = task
  else
    taken[#taken + 1] = task
  end
  room = room - 1
end
for _, message in ipairs(kept) do
  redis.call('SELECT', message[1])
  redis.call('LPUSH', message[2], message[3])
  redis.call('PUBLISH', message[4], message[5])
end
return taken, queued
