-- cancel: ask an active job to stop. A running one reads `cancelling` from now on and the
-- process that runs it is told at once (pub/sub); a queued one leaves the queue and ends
-- `cancelled` at once, without ever running; and so does one that reads `lost` (its lease is
-- stale and it has no attempt left: no run holds it, and none would ever hear the request —
-- left lost by a sweep under MAX_ATTEMPTS=1, its lease is not due for a job TTL). Ended, any
-- write of its run that comes back is refused (`run_state`: 'ended').
-- A pipeline is asked to stop with its steps (`cancel_pipeline` in order.lua), and so is the
-- pipeline of a step named on its own.
-- KEYS (after the group's keys): the job's record; for a queued or lost job or a pipeline, what
-- its end touches (`reach_end` in order.lua: a pipeline's steps among them).
-- A: id, by (the caller's name, recorded as cancelled_by by the first request)
-- Returns 'requested' (or already requested), 'not_active' (ended, or taken over), 'missing',
-- or {'stale', keys…} (the call left out keys its end touches: nothing written).
local id, by = A[1], A[2]
local FIELDS = {'status', 'superseded_by', 'tenant', 'kind', 'percent', 'step',
  'cancel_requested_ms', 'created_ms', 'events', 'event_ms', 'awaited', 'in_order',
  'waiting_for', 'pipeline', 'steps', 'heartbeat_ms', 'started_ms', 'attempt', 'lost_ms'}
local hkey = k_job(id)
local job = read_job(hkey, FIELDS)
if not job.status then return 'missing' end
if job.superseded_by or ended(job.status) then return 'not_active' end
if job.cancel_requested_ms then return 'requested' end
local now = now_ms()
local lost = reads_lost(job, now)
-- A step of an active pipeline: the pipeline is asked to stop, its running step with it,
-- whichever step was named (a step's cancel ends its pipeline the same way as the
-- pipeline's). Its reach is the step's end and the pipeline's.
if job.pipeline then
  local parent = job.pipeline
  local missed = reach(function()
    reach_end(id, job, now)
    local pkey = k_job(parent)
    if not reached(pkey) then return end
    local p = read_job(pkey, {'tenant', 'kind', 'in_order', 'steps'})
    if p.tenant then reach_end(parent, p, now) end
  end)
  if missed then return answer_stale(missed) end
  local p = read_job(k_job(parent), FIELDS)
  if p.status and not p.superseded_by and not ended(p.status) then
    if p.cancel_requested_ms then return 'requested' end
    cancel_pipeline(parent, p, by, now)
    return 'requested'
  end
end
if job.steps or job.status == 'queued' or lost then
  local missed = reach(reach_end, id, job, now)
  if missed then return answer_stale(missed) end
end
if job.steps then
  cancel_pipeline(id, job, by, now)
  return 'requested'
end
local fields = {cancel_requested_ms = now, cancelled_by = by, updated_ms = now}
note(id, job, fields, 'cancel_requested', 'cancelling', job.percent, step_of(job), now)
if job.status == 'queued' or lost then
  if not lost then redis.call('LREM', K_QUEUE, 1, id) end
  end_cancelled(id, job, fields, now)
  return 'requested'
end
write_job(hkey, fields)
redis.call('PUBLISH', CHANNEL, 'cancel:' .. id)
return 'requested'
