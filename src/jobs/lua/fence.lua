-- fence: whether a catalogue write may happen now, checked inside the write's own script. Put
-- after record.lua in front of each catalogue script that writes (jobs/fence.rs, FENCE_LUA).
-- A run's write needs its job held by its claim (`is_held`). Once the run's record is gone, a
-- tombstone of its tenant at or after the job's creation says the tenant was deleted since
-- (purge.lua); with none, the store lost the record and the run's heartbeat writes it back.
-- An import's write needs no tombstone later than the one it saw when it began.
-- The call's fence: KEYS[at] the tenant's tombstone, KEYS[at + 1] the run's job record (none
-- for an import); ARGV[1] since (a tombstone at or after it refuses: the job's created_ms, or
-- one past the tombstone the import saw), ARGV[2] the run's claim ('' for an import).
-- Answers 'held', 'fenced', or 'missing' (a run's record is gone and nothing says why).
local function fence_at(at)
  local record, claim = KEYS[at + 1], ARGV[2]
  if record then
    local job = read_job(record, HELD_FIELDS)
    if job.status then
      if is_held(job, claim) then return 'held' end
      return 'fenced'
    end
  end
  local gone = redis.call('GET', KEYS[at])
  if gone and tonumber(gone) >= tonumber(ARGV[1]) then return 'fenced' end
  if record then return 'missing' end
  return 'held'
end
