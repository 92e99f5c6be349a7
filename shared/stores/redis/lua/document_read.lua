-- Reads a small document (shared/documents.py) with the server's clock.
-- KEYS: the document (hash: v, its version; body, its JSON).
-- Returns {seconds, microseconds, version, body}: version and body '' when
-- the document is not there.
local t = redis.call('TIME')
local found = redis.call('HMGET', KEYS[1], 'v', 'body')
return {t[1], t[2], found[1] or '', found[2] or ''}
