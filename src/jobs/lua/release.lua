-- release: a process shutting down gives a run back. The job goes to the head of the ready
-- queue and its attempt is not counted again (free_retry); a job that was asked to stop
-- ends cancelled instead.
-- A: id, claim
-- Returns 1 requeued (or cancelled), -1 fenced (this run no longer holds the job).
local id = A[1]
local hkey = k_job(id)
local code, st = run_state(hkey, A[2])
if code ~= 1 then return -1 end
local now = now_ms()
if st[5] then
  end_cancelled(id, st[6], st[7], st[4], now)
  return 1
end
local step = 'requeued: its replica shut down; waiting for a worker'
redis.call('HSET', hkey, 'status', 'queued', 'free_retry', 1, 'updated_ms', now, 'step', step)
note(id, st[6], st[7], 'released', 'queued', st[4], step, now)
requeue(id)
return 1
