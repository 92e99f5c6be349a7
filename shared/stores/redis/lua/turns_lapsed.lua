-- The workers whose registration lapsed (not registered again before the
-- server's clock passed its expiry), dropped from the book; their names.
-- ARGV: prefix.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local workers, slots = ARGV[1] .. 'workers', ARGV[1] .. 'slots'
local lapsed = redis.call('ZRANGEBYSCORE', workers, '-inf', now)
if #lapsed > 0 then
  redis.call('ZREM', workers, unpack(lapsed))
  redis.call('HDEL', slots, unpack(lapsed))
end
return lapsed
