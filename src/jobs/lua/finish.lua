-- finish: end a run's job and release its lock if the lock still holds it, in one step.
-- A: the run's job (see `run_args` in the prelude), then the outcome as a named list:
--    status (done|failed|cancelled), step, and result (JSON; a failed job may carry its
--    partial report) and error (the class) when it has them
-- Returns 'applied', 'ended' (already ended), 'fenced' (another run or job holds it). A
-- missing record (the store came back empty) is written back whole so the result is not
-- lost, unless a newer job holds the lock by then.
local id, claim, run_percent, job, i = run_args()
local outcome = named_args(i)
local tenant, kind = job.tenant, job.kind
local hkey = k_job(id)
local code, st = run_state(hkey, claim)
local now = now_ms()
if code == 'missing' then
  local holder = redis.call('GET', k_lock(tenant, kind))
  if holder and holder ~= id then return 'fenced' end
  job.claim, job.restored = claim, 1
  write_job(hkey, job)
  note(id, tenant, kind, 'restored', 'running', run_percent, outcome.step, now)
  list_push(tenant, id)
elseif code ~= 'held' then
  return code
end
local fields = outcome
fields.percent = math.max(tonumber(st.percent) or 0, run_percent)
if outcome.status == 'done' then fields.percent = 100 end
fields.updated_ms, fields.heartbeat_ms, fields.finished_ms = now, now, now
fields.started_ms = st.started_ms or now
end_job(id, tenant, kind, fields)
return 'applied'
