-- restore: write back the record of a run that is alive but whose record the store lost
-- (Redis came back empty), so pollers see it again instead of a 404.
-- A: the run's job (see RUN_ARGS in the prelude), then step, attempt, worker
-- Returns 1 restored, 2 the record exists, -1 fenced (a newer job holds the lock).
local id, tenant, kind = A[1], A[3], A[4]
local hkey = k_job(id)
if redis.call('EXISTS', hkey) == 1 then return 2 end
local lock = k_lock(tenant, kind)
local holder = redis.call('GET', lock)
if holder and holder ~= id then return -1 end
local now = now_ms()
redis.call('HSET', hkey, unpack(run_origin({'tenant', tenant, 'kind', kind, 'params', A[5],
  'status', 'running', 'percent', A[7], 'step', A[11], 'created_ms', A[6],
  'started_ms', now, 'updated_ms', now, 'heartbeat_ms', now, 'restored', 1,
  'claim', A[2], 'attempt', A[12], 'worker', A[13]})))
redis.call('EXPIRE', hkey, TTL)
note(id, tenant, kind, 'restored', 'running', A[7], A[11], now, {'attempt', A[12], 'worker', A[13]})
redis.call('EXPIRE', k_timeline(id), TTL)
redis.call('SET', lock, id, 'EX', TTL)
redis.call('ZADD', K_LEASES, now + STALE, id)
list_push(tenant, id)
return 1
