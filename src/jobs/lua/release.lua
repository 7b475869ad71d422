-- release: a process shutting down gives a run back. The job goes to the head of the ready
-- queue and its attempt is not counted again (free_retry); a job that was asked to stop
-- ends cancelled instead.
-- KEYS (after the group's keys): the job's record and the group's lease index; for a job asked
-- to stop, what its end touches (`reach_end` in order.lua).
-- A: id, claim
-- Returns 'requeued' (or cancelled), 'fenced' (this run no longer holds the job), or
-- {'stale', keys…} (the call left out keys its end touches: nothing written).
local id = A[1]
local hkey = k_job(id)
local code, job = run_state(hkey, A[2])
if code ~= 'held' then return 'fenced' end
local now = now_ms()
if job.cancel_requested_ms then
  local missed = reach(reach_end, id, job, now)
  if missed then return answer_stale(missed) end
  end_cancelled(id, job, {}, now)
  return 'requeued'
end
k_group(K_LEASES)
local step = 'requeued: its replica shut down; waiting for a worker'
local fields = {status = 'queued', free_retry = 1, updated_ms = now, step = step}
note(id, job, fields, 'released', 'queued', job.percent, step, now)
write_job(hkey, fields)
requeue(id)
return 'requeued'
