-- Lets a pair's lease go, if `holder` still holds it.
-- KEYS: the pair's lease. ARGV: holder.
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
