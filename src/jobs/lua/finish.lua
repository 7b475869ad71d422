-- finish: end a run's job and release its lock if the lock still holds it, in one step.
-- A: id, claim, status (done|failed|cancelled), result (JSON, "" for none), error class
--    ("" for none), step, tenant, kind, params (JSON), created_ms, percent (the run's last)
-- Returns 1 applied, 2 already ended, -1 fenced (another run or job holds it). A missing
-- record (the store came back empty) is written back whole so the result is not lost,
-- unless a newer job holds the lock by then.
local id, tenant, kind = A[1], A[7], A[8]
local hkey = k_job(id)
local code, st = run_state(hkey, A[2])
local now = now_ms()
if code == 0 then
  local holder = redis.call('GET', k_lock(tenant, kind))
  if holder and holder ~= id then return -1 end
  redis.call('HSET', hkey, 'tenant', tenant, 'kind', kind, 'params', A[9],
    'created_ms', A[10], 'claim', A[2], 'restored', 1)
  list_push(tenant, id)
elseif code ~= 1 then
  return code
end
local percent = math.max(tonumber(st[4]) or 0, tonumber(A[11]))
if A[3] == 'done' then percent = 100 end
local fields = {'status', A[3], 'percent', percent, 'step', A[6], 'updated_ms', now,
  'heartbeat_ms', now, 'finished_ms', now, 'started_ms', st[8] or now}
if A[4] ~= '' then table.insert(fields, 'result'); table.insert(fields, A[4]) end
if A[5] ~= '' then table.insert(fields, 'error'); table.insert(fields, A[5]) end
end_job(id, tenant, kind, fields)
return 1
