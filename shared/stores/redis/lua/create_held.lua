-- A send's create and its hold in the turn book, in one round trip: CREATE
-- (lua/create.lua) and, only when it created the task, one step of the turn
-- book (lua/turns.lua) holding it and taking what has its turn. When the
-- task's message came along (the broker being a database of this server,
-- shared.broker.outbox), it is kept with the book first (`msg:<task>`, for at
-- most `keep_for` seconds, while the book holds fewer than `keep_most`
-- tasks), so whichever step takes the task queues and announces it: this
-- one, if the task has room at once, or a later one, such as the release
-- in a worker's last write (lua/commit_released.lua).
-- KEYS: CREATE's.
-- ARGV: n, CREATE's n arguments, m (0 or 8), the message's m arguments
-- (task id, broker db, queue, message, event channel, event, keep_most,
-- keep_for), then the turn book's.
-- Returns CREATE's two values, the ids the book took but did not queue
-- ({} when not created), 1 when the task's own message was queued here (else
-- 0), and 1 when it was queued or kept (else 0).
local function create(KEYS, ARGV)
--#include create
end
local function turns(ARGV)
--#include turns
end
local n = tonumber(ARGV[1])
local outcome = create(KEYS, {unpack(ARGV, 2, n + 1)})
if outcome[1] ~= 'created' then
  return {outcome[1], outcome[2], {}, 0, 1}
end
local m = tonumber(ARGV[n + 2])
local book = {unpack(ARGV, n + 3 + m)}
local own = ARGV[n + 3]
local kept = 0
if m > 0 and redis.call('HLEN', book[1] .. 'where') < tonumber(ARGV[n + 9]) then
  kept = 1
  local key = book[1] .. 'msg:' .. own
  redis.call('HSET', key, 'd', ARGV[n + 4], 'q', ARGV[n + 5], 'm', ARGV[n + 6],
    'c', ARGV[n + 7], 'a', ARGV[n + 8])
  redis.call('EXPIRE', key, ARGV[n + 10])
end
local taken, queued = turns(book)
if kept == 1 then
  for _, id in ipairs(queued) do
    if id == own then
      return {outcome[1], outcome[2], taken, 1, 1}
    end
  end
end
return {outcome[1], outcome[2], taken, 0, kept}
