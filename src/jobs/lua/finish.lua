-- finish: end a run's job and release its lock if the lock still holds it, in one step.
-- A: the run's job (see RUN_ARGS in the prelude), then status (done|failed|cancelled),
--    result (JSON, "" for none; a failed job may carry its partial report), error class ("" for none), step
-- Returns 1 applied, 2 already ended, -1 fenced (another run or job holds it). A missing
-- record (the store came back empty) is written back whole so the result is not lost,
-- unless a newer job holds the lock by then.
local id, tenant, kind = A[1], A[3], A[4]
local hkey = k_job(id)
local code, st = run_state(hkey, A[2])
local now = now_ms()
if code == 0 then
  local holder = redis.call('GET', k_lock(tenant, kind))
  if holder and holder ~= id then return -1 end
  redis.call('HSET', hkey, unpack(run_origin({'tenant', tenant, 'kind', kind, 'params', A[5],
    'created_ms', A[6], 'claim', A[2], 'restored', 1})))
  note(id, tenant, kind, 'restored', 'running', A[7], A[14], now)
  list_push(tenant, id)
elseif code ~= 1 then
  return code
end
local percent = math.max(tonumber(st[4]) or 0, tonumber(A[7]))
if A[11] == 'done' then percent = 100 end
local fields = {'status', A[11], 'percent', percent, 'step', A[14], 'updated_ms', now,
  'heartbeat_ms', now, 'finished_ms', now, 'started_ms', st[8] or now}
if A[12] ~= '' then table.insert(fields, 'result'); table.insert(fields, A[12]) end
if A[13] ~= '' then table.insert(fields, 'error'); table.insert(fields, A[13]) end
end_job(id, tenant, kind, fields)
return 1
