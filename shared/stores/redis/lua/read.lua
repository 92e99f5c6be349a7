-- One task, as one reply: its snapshot, event number, tail and generation
-- (`g`), read together
-- (a snapshot rewritten between two separate reads would lose events).
-- KEYS: task, tail. A key of the wrong type is an error (unreadable data).
local found = redis.call('HMGET', KEYS[1], 'doc', 'seq', 'g')
return {found[1], found[2], redis.call('GET', KEYS[2]), found[3]}
