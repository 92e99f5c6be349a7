-- A write that takes its task out of flight (its new state is neither
-- submitted nor working) and the turn book's step that follows it, in one
-- round trip: COMMIT (lua/commit.lua) and, only when it wrote, one step of
-- the turn book (lua/turns.lua) releasing the task and taking what has room
-- (queuing itself each message kept with the book).
-- KEYS: COMMIT's.
-- ARGV: n, COMMIT's n arguments, then the turn book's.
-- Returns COMMIT's value, then the ids the book took but did not queue ({}
-- when not written).
local function commit(KEYS, ARGV)
--#include commit
end
local function turns(ARGV)
--#include turns
end
local n = tonumber(ARGV[1])
local written = commit(KEYS, {unpack(ARGV, 2, n + 1)})
if written ~= 1 then
  return {written, {}}
end
local taken = turns({unpack(ARGV, n + 2)})
return {written, taken}
