-- Included first by the scripts that write a task (see scripts.py on lineages).
-- This run of redis-server (its run_id changes at every start).
local function this_run() return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') end
-- The server's clock in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
