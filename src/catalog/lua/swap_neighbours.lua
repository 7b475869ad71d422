-- swap_neighbours: replaces a tenant's neighbour table by its staged copy in one step, only
-- while the run that wrote it still holds its job (`is_held` of the job record's schema,
-- jobs/lua/record.lua, loaded in front of this script): the record reads `running`, with this
-- run's claim, and no `superseded_by`. A refused swap deletes the staged copy and leaves the
-- live table whole.
-- KEYS[1] staging table (may not exist: an empty table), KEYS[2] live table, KEYS[3] the
-- job's record. ARGV[1] the run's claim. Answers 1 swapped, 0 refused (fenced off).
if not is_held(read_job(KEYS[3], HELD_FIELDS), ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  -- RENAME is atomic; the live table has no TTL, so the staging one's goes here too.
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('PERSIST', KEYS[2])
else
  redis.call('DEL', KEYS[2])
end
return 1
