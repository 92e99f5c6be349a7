-- A live worker's slots in the turn book, until the server's clock passes
-- now + ttl. ARGV: prefix, worker, slots, ttl seconds.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
redis.call('ZADD', ARGV[1] .. 'workers', now + tonumber(ARGV[4]), ARGV[2])
redis.call('HSET', ARGV[1] .. 'slots', ARGV[2], ARGV[3])
return 1
