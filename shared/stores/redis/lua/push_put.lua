-- Adds (or replaces, by id) a push config unless the task holds `cap` others
-- already; one atomic step.
-- KEYS: the task's configs (hash), the set of tasks pushing.
-- ARGV: config id, config JSON, cap, task id.
local full = redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3])
if full and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[4])
return 1
