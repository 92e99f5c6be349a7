--#include clock
--#include listed
-- The worker's claim in one step: if the task is in the expected state, its
-- status update is appended (made here from the two halves of the event
-- around the context id, which the task records as JSON at creation) and the
-- task is returned as the claim left it; otherwise as it stands.
-- KEYS: as COMMIT's. ARGV: expected state, '' (no snapshot), then ARGV[3..10]
-- as COMMIT's, two unused, then the event's text before its context id,
-- between it and its generation, and after that, then the time index the
-- task is now in ('' = none). The generation is one more
-- than the task's (`g`); 0 when the task keeps none or it is unknown.
-- Returns {outcome, doc, seq, tail}: outcome 'claimed', 'refused', 'unknown',
-- or 'unsupported' (a task saved before contexts were recorded, or one that
-- waits for its context: its claim is the caller's, `shared.transitions.claim`).
local found = redis.call('HMGET', KEYS[1], 'state', 'seq', 'doc', 'cj', 'o', 'c', 'g')
if not found[3] or not found[2] then return {'unknown'} end
if found[1] == ARGV[1] and found[4] then
  local owner, context_digest = found[5], found[6]
  local seq = tonumber(found[2])
  local generation, stamp = '', '0'
  if found[7] then generation = found[7] end
  if found[7] and found[7] ~= '0' then
    generation = string.format('%.0f', tonumber(found[7]) + 1)
    stamp = generation
  end
  local events = {ARGV[13] .. found[4] .. ARGV[14] .. stamp .. ARGV[15]}
  local entered, redo = ARGV[16], {'unsupported'}
  --#include append
  local now = redis.call('HMGET', KEYS[1], 'doc', 'seq')
  return {'claimed', now[1], now[2], redis.call('GET', KEYS[2]), generation}
end
local outcome = 'refused'
if found[1] == ARGV[1] then outcome = 'unsupported' end
return {outcome, found[3], found[2], redis.call('GET', KEYS[2]), found[7]}
