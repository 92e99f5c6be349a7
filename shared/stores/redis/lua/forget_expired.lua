-- Listing entries of tasks that expired. KEYS: expiring index.
-- ARGV: now, key prefix. Returns how many were removed.
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
