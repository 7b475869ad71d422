-- tick: record a run's progress; percent never goes down.
-- A: id, claim, percent (0-100), step
-- Returns 'applied', or why not: 'missing', 'ended', 'fenced' (this run no longer holds it).
local id = A[1]
local hkey = k_job(id)
local code, job = run_state(hkey, A[2])
if code ~= 'held' then return code end
local percent = math.max(tonumber(job.percent) or 0, tonumber(A[3]))
local now = now_ms()
write_job(hkey, {percent = percent, step = A[4], updated_ms = now})
note(id, job.tenant, job.kind, 'progress', job.cancel_requested_ms and 'cancelling' or 'running',
  percent, A[4], now)
return 'applied'
