-- Where a status stamped at `ts` is filed in the listing indexes and the
-- status history: at `ts`, or just after the latest moment a listing is read
-- as of (`<prefix>listed`, which each listing raises in the step that reads
-- its page) when that moment is at or after `ts`. Such a change was stamped
-- before the listing began but is saved after its first page was read
-- without it; filed at its own stamp, the later pages would place it above
-- their cursor and skip it. Filed after the moment, the listing places it
-- where its history says it was then.
local function filed_at(prefix, ts)
  local moment = redis.call('ZSCORE', prefix .. 'listed', 'as_of')
  if moment and tonumber(ts) <= tonumber(moment) then
    return string.format('%.17g', tonumber(moment) + 2e-6)
  end
  return ts
end
