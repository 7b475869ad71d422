-- recover: sweep runs whose lease expired (their process stopped renewing it).
-- KEYS (after the group's keys): the group's lease index, and for each run whose lease expired
-- its record and what its end touches (`reach_end` in order.lua): its caller learns them from
-- a `stale` answer.
-- A: how many to sweep at most in one step
-- Returns a flat list of {outcome, id}: 'requeued' for its next attempt, 'lost' ended
-- failed/Lost after its last attempt; or {'stale', keys…} (nothing written). With MAX_ATTEMPTS 1 an expired run is left as it is
-- ('left_lost'): it reads `lost`, and the next create of its tenant and kind takes over; it
-- will not run again (its run is fenced off, should its process come back), so its tenant's order and its pipeline go on without it (`after_end`).
-- It stays in the lease index, scored a job TTL from now (TTL is in seconds), so the active jobs'
-- readers (the overview, `status=lost`) still find it while no sweep takes it again: its
-- record has expired by then (its TTL runs from its last renewal, before now), and the sweep
-- that meets its entry then drops it; the create that takes it over drops it before.
-- What a run left lost after its first claim reads beside RUN_FIELDS (its start may be implied).
local LEFT_LOST_FIELDS = {'worker', '@1'}
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', k_group(K_LEASES), '-inf', now, 'LIMIT', 0, tonumber(A[1]))
local missed = reach(function()
  for _, id in ipairs(due) do
    local hkey = k_job(id)
    if reached(hkey) then
      local job = read_job(hkey, RUN_FIELDS)
      if job.status == 'running' and not job.superseded_by then reach_end(id, job, now) end
    end
  end
end)
if missed then return answer_stale(missed) end
local out = {}
for _, id in ipairs(due) do
  redis.call('ZREM', k_group(K_LEASES), id)
  local hkey = k_job(id)
  local job = read_job(hkey, RUN_FIELDS)
  if job.status == 'running' and not job.superseded_by then
    local attempt = tonumber(job.attempt or '1')
    if job.cancel_requested_ms then
      end_cancelled(id, job, {}, now)
    elseif attempt < MAX_ATTEMPTS and read_job(hkey, {'lost_ms'}).lost_ms then
      -- Left lost by an earlier sweep (under MAX_ATTEMPTS=1; this one runs with more): it
      -- stays lost, never re-queued, and its entry goes.
    elseif attempt < MAX_ATTEMPTS then
      -- The words it read since its lease went stale (Snapshot::read_at): the same answer
      -- before and after this sweep.
      local step = 're-queued: its worker stopped answering'
      local fields = {status = 'queued', recovered_ms = now, updated_ms = now, step = step}
      note(id, job, fields, 'requeued', 'queued', job.percent, step, now, attempt)
      write_job(hkey, fields)
      requeue(id)
      out[#out + 1] = 'requeued'; out[#out + 1] = id
    elseif MAX_ATTEMPTS > 1 then
      end_job(id, job, {status = 'failed', error = 'Lost', step = 'failed: Lost',
        finished_ms = now}, now)
      out[#out + 1] = 'lost'; out[#out + 1] = id
    else
      redis.call('ZADD', k_group(K_LEASES), int(now + TTL * 1000), id)
      -- Its claim is raised: if its process comes back, its writes and heartbeats are fenced
      -- off (`is_held`) and it reads lost for good.
      -- `lost_ms` marks it: it reads lost from it, whatever MAX_ATTEMPTS the readers run with.
      local fields = {claim = tostring(tonumber(job.claim or FIRST_CLAIM) + 1), lost_ms = now}
      if not job.claim then
        -- Its first claim: what the record implied until now is written with the claim.
        local once = read_job(hkey, LEFT_LOST_FIELDS)
        if not once['@1'] then
          fields['@1'] = implied_start(once.worker or '', job.started_ms, job.created_ms)
        end
        fields.attempt, fields.started_ms = FIRST_CLAIM, job.started_ms or job.created_ms
      end
      local step = read_job(hkey, {'step'}).step or USUAL_STEPS[job.status]
      note(id, job, fields, 'lost', 'lost', job.percent, step, now)
      write_job(hkey, fields)
      after_end(id, job, {status = 'failed', error = 'Lost'}, now)
      out[#out + 1] = 'left_lost'; out[#out + 1] = id
    end
  end
end
return out
