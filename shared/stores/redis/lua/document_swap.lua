-- Writes a small document if it is still at the version the caller read.
-- KEYS: the document (hash: v, body).
-- ARGV: the version read ('' : not there), the new version, the new body
-- ('' deletes the document), its time to live in milliseconds ('' : for good).
-- Returns 1 when written, 0 when another write came first.
local v = redis.call('HGET', KEYS[1], 'v') or ''
if v ~= ARGV[1] then
  return 0
end
if ARGV[3] == '' then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'body', ARGV[3])
if ARGV[4] == '' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
