-- A send's create and its hold in the turn book, in one round trip: CREATE
-- (lua/create.lua) and, only when it created the task, one step of the turn
-- book (lua/turns.lua) holding it and taking what has its turn.
-- KEYS: CREATE's.
-- ARGV: n, CREATE's n arguments, then the turn book's.
-- Returns CREATE's two values, then the ids the book took ({} when not created).
local function create(KEYS, ARGV)
--#include create
end
local function turns(ARGV)
--#include turns
end
local n = tonumber(ARGV[1])
local outcome = create(KEYS, {unpack(ARGV, 2, n + 1)})
if outcome[1] ~= 'created' then
  return {outcome[1], outcome[2], {}}
end
return {outcome[1], outcome[2], turns({unpack(ARGV, n + 2)})}
