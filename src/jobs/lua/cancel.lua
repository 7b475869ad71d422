-- cancel: ask an active job to stop. A running one reads `cancelling` from now on and the
-- process that runs it is told at once (pub/sub); a queued one leaves the queue and ends
-- `cancelled` at once, without ever running.
-- A: id, by (the caller's name, recorded as cancelled_by by the first request)
-- Returns 'requested' (or already requested), 'not_active' (ended, or taken over), 'missing'.
local id, by = A[1], A[2]
local hkey = k_job(id)
local job = read_job(hkey, {'status', 'superseded_by', 'tenant', 'kind', 'percent', 'step'})
if not job.status then return 'missing' end
if job.superseded_by or ended(job.status) then return 'not_active' end
local now = now_ms()
if job.status == 'queued' then
  redis.call('LREM', K_QUEUE, 1, id)
  write_job(hkey, {cancel_requested_ms = now, cancelled_by = by})
  note(id, job.tenant, job.kind, 'cancel_requested', 'cancelling', job.percent, job.step, now,
    {'by', by})
  end_cancelled(id, job.tenant, job.kind, job.percent, now)
  return 'requested'
end
if redis.call('HSETNX', hkey, field_name('cancel_requested_ms'), now) == 1 then
  write_job(hkey, {updated_ms = now, cancelled_by = by})
  note(id, job.tenant, job.kind, 'cancel_requested', 'cancelling', job.percent, job.step, now,
    {'by', by})
  redis.call('PUBLISH', CHANNEL, 'cancel:' .. id)
end
return 'requested'
