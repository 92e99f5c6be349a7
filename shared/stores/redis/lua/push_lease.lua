-- Takes or renews a (task, webhook) pair's lease for a running delivery
-- unless another running one holds it; a booking (a holder starting with
-- the booked prefix: a message sent, not yet run) gives way.
-- KEYS: the pair's lease. ARGV: holder, milliseconds, the booked prefix.
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] and string.sub(holder, 1, #ARGV[3]) ~= ARGV[3] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
