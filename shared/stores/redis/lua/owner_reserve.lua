-- Reserves a slot among an owner's unfinished tasks for a task id, unless
-- they number the cap already; one atomic step, by the server's clock.
-- KEYS: the owner's active ids (hash: task id -> when reserved, seconds).
-- ARGV: task id, cap.
-- Returns {} when reserved (or held already), else every held id followed
-- by the seconds since it was reserved: {id, age, id, age, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return {}
end
if redis.call('HLEN', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%.6f', now))
  return {}
end
local held = redis.call('HGETALL', KEYS[1])
local found = {}
for i = 1, #held, 2 do
  found[#found + 1] = held[i]
  found[#found + 1] = string.format('%.6f', now - tonumber(held[i + 1]))
end
return found
