-- Puts one member in some scored indexes and out of others, in one step.
-- KEYS: the indexes (sorted sets). ARGV: the member, then one score per key
-- ('' : out of that index).
for i, key in ipairs(KEYS) do
  local score = ARGV[i + 1]
  if score == '' then
    redis.call('ZREM', key, ARGV[1])
  else
    redis.call('ZADD', key, score, ARGV[1])
  end
end
return 1
