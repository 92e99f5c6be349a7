-- A send's create and its hold in the turn book, in one round trip: CREATE
-- (lua/create.lua) and, only when it created the task, one step of the turn
-- book (lua/turns.lua) holding it and taking what has its turn; when that
-- step took the task itself and its message came along (the broker being a
-- database of this server, shared.broker.along), the message queued and
-- announced there too.
-- KEYS: CREATE's.
-- ARGV: n, CREATE's n arguments, m (0 or 6), the message's m arguments
-- (task id, broker db, queue, message, event channel, event), then the turn
-- book's.
-- Returns CREATE's two values, the ids the book took ({} when not created),
-- and 1 when the message was queued here, else 0.
local function create(KEYS, ARGV)
--#include create
end
local function turns(ARGV)
--#include turns
end
local n = tonumber(ARGV[1])
local outcome = create(KEYS, {unpack(ARGV, 2, n + 1)})
if outcome[1] ~= 'created' then
  return {outcome[1], outcome[2], {}, 0}
end
local m = tonumber(ARGV[n + 2])
local taken = turns({unpack(ARGV, n + 3 + m)})
if m > 0 then
  local own = ARGV[n + 3]
  for _, id in ipairs(taken) do
    if id == own then
      -- Last: the script's own database changes here, for nothing after it.
      redis.call('SELECT', ARGV[n + 4])
      redis.call('LPUSH', ARGV[n + 5], ARGV[n + 6])
      redis.call('PUBLISH', ARGV[n + 7], ARGV[n + 8])
      return {outcome[1], outcome[2], taken, 1}
    end
  end
end
return {outcome[1], outcome[2], taken, 0}
