-- restore: write back the record of a run that is alive but whose record the store lost
-- (Redis came back empty), so pollers see it again instead of a 404.
-- A: the run's job (see `run_args` in the prelude), then what the run knows of itself as a
--    named list: step, attempt, worker
-- Returns 'restored', 'present' (the record exists), 'fenced' (a newer job holds the lock).
local id, claim, percent, job, i = run_args()
local live = named_args(i)
local tenant, kind = job.tenant, job.kind
local hkey = k_job(id)
if redis.call('EXISTS', hkey) == 1 then return 'present' end
local lock = k_lock(tenant, kind)
local holder = redis.call('GET', lock)
if holder and holder ~= id then return 'fenced' end
local now = now_ms()
for name, value in pairs(live) do job[name] = value end
job.status, job.percent, job.claim, job.restored = 'running', percent, claim, 1
job.started_ms, job.updated_ms, job.heartbeat_ms = now, now, now
write_job(hkey, job)
redis.call('EXPIRE', hkey, TTL)
note(id, tenant, kind, 'restored', 'running', percent, live.step, now,
  {'attempt', live.attempt, 'worker', live.worker})
redis.call('EXPIRE', k_timeline(id), TTL)
redis.call('SET', lock, id, 'EX', TTL)
redis.call('ZADD', K_LEASES, now + STALE, id)
list_push(tenant, id)
return 'restored'
