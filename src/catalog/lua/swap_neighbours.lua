-- swap_neighbours: replaces a tenant's neighbour table by its staged copy in one step, only
-- while the run that wrote it still holds its job and its tenant was not deleted since
-- (`fence_at` of jobs/lua/fence.lua, loaded in front of this script with the job record's
-- schema). A refused swap deletes the staged copy and leaves the live table whole.
-- KEYS[1] staging table (may not exist: an empty table), KEYS[2] live table, KEYS[3] the
-- tenant's tombstone, KEYS[4] the run's job record. ARGV[1] since, ARGV[2] the run's claim.
-- Answers 'swapped', or why not: 'fenced', 'missing' (the run's record is gone).
local state = fence_at(3)
if state ~= 'held' then
  redis.call('DEL', KEYS[1])
  return state
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  -- RENAME is atomic; the live table has no TTL, so the staging one's goes here too.
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('PERSIST', KEYS[2])
else
  redis.call('DEL', KEYS[2])
end
return 'swapped'
