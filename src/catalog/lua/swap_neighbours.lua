-- swap_neighbours: replaces a tenant's neighbour table by its staged copy in one step, only
-- while the run that wrote it still holds its job — the `run_state` rule of the job scripts'
-- prelude (jobs/lua/prelude.lua): the record reads `running`, with this run's claim, and no
-- `superseded_by`. A refused swap deletes the staged copy and leaves the live table whole.
-- KEYS[1] staging table (may not exist: an empty table), KEYS[2] live table, KEYS[3] the
-- job's record. ARGV[1] the run's claim. Answers 1 swapped, 0 refused (fenced off).
local st = redis.call('HMGET', KEYS[3], 'status', 'claim', 'superseded_by')
if st[1] ~= 'running' or st[2] ~= ARGV[1] or st[3] then
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
