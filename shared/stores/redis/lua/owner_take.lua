-- Takes one token from an owner's bucket, by the server's clock (so front
-- ends with skewed clocks agree); one atomic step.
-- KEYS: the owner's bucket (hash: tokens, at; gone once it would be full).
-- ARGV: rate (tokens a second), size (tokens when full).
-- Returns '0' when taken, else the seconds until a token is free (a string:
-- a Lua number would reach the client as an integer).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, size = tonumber(ARGV[1]), tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(state[1]) or size, tonumber(state[2]) or now
tokens = math.min(size, tokens + math.max(0, now - at) * rate)
if tokens < 1 - 1e-9 then
  return string.format('%.6f', (1 - tokens) / rate)
end
tokens = math.max(0, tokens - 1)
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),
  'at', string.format('%.6f', math.max(at, now)))
-- Once full again the bucket is as good as new: let it go then.
redis.call('PEXPIRE', KEYS[1], math.ceil((size - tokens) / rate * 1000) + 1000)
return '0'
