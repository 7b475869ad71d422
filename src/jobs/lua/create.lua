-- create: queue a new job and take its tenant+kind lock in one step, or name the active
-- holder, or refuse when the ready queue is full or the tenant created its share this minute.
-- A: id, tenant, kind, params (JSON), step, created_by, request_id, idempotency key ('' for
--    none), params fingerprint, creates per minute (0: no limit), the job it retries
--    ('' for none), worker to claim it for ('' for none: queue it)
-- Returns {1, now_ms} created and queued; {6, now_ms} created and claimed for the worker
-- (claim 1, attempt 1) because no job waited ahead of it; {0, holder_id} an active holder
-- keeps the lock; {2, ''} queue
-- full; {3, job_id} the key was recorded with this job and these parameters (a retry);
-- {4, job_id} the key was recorded with other parameters; {5, ms} rate limited for ms more.
-- A queued holder is always active (it costs nothing while it waits and is never stale); a
-- running one whose lease is stale is taken over and fenced off (superseded_by).
-- Only a created job records its key and counts against the limit: a refusal changes nothing.
local id, tenant, kind = A[1], A[2], A[3]
local idem = nil
if A[8] ~= '' then
  idem = k_idem(tenant, kind, A[8])
  local seen = redis.call('HMGET', idem, 'job', 'fingerprint')
  -- A key outlives its job only when the job was trimmed from a full listing: it is spent.
  if seen[1] and redis.call('EXISTS', k_job(seen[1])) == 1 then
    if seen[2] == A[9] then return {3, seen[1]} end
    return {4, seen[1]}
  end
end
local now = now_ms()
local lock = k_lock(tenant, kind)
local holder = redis.call('GET', lock)
local fence_holder = false
local old = nil
if holder then
  local st = redis.call('HMGET', k_job(holder), 'status', 'heartbeat_ms', 'created_ms',
    'percent', 'step')
  if st[1] == 'queued' then return {0, holder} end
  if st[1] == 'running' then
    if now - tonumber(st[2] or st[3]) < STALE then return {0, holder} end
    fence_holder = true
    old = st
  end
end
local waiting = redis.call('LLEN', K_QUEUE)
if waiting >= MAX_QUEUED then return {2, ''} end
local limit = tonumber(A[10])
local window = math.floor(now / 60000)
local rate = k_rate(tenant, window)
if limit > 0 and tonumber(redis.call('GET', rate) or '0') >= limit then
  return {5, tostring((window + 1) * 60000 - now)}
end
if fence_holder then
  redis.call('HSET', k_job(holder), 'superseded_by', id)
  redis.call('ZREM', K_LEASES, holder)
  note(holder, tenant, kind, 'superseded', 'lost', old[4], old[5], now, {'superseded_by', id})
end
local hkey = k_job(id)
local here = A[12] ~= '' and waiting == 0
-- Fields left out read as their defaults: percent 0, attempt 0, updated_ms and heartbeat_ms
-- equal to created_ms. Fewer fields keep this, the hottest script, cheap.
if here then
  redis.call('HSET', hkey, 'tenant', tenant, 'kind', kind, 'params', A[4],
    'status', 'running', 'step', 'starting', 'created_ms', now, 'started_ms', now,
    'claim', 1, 'attempt', 1, 'worker', A[12], 'created_by', A[6], 'request_id', A[7])
  redis.call('ZADD', K_LEASES, now + STALE, id)
else
  redis.call('HSET', hkey, 'tenant', tenant, 'kind', kind, 'params', A[4],
    'status', 'queued', 'step', A[5], 'created_ms', now, 'created_by', A[6], 'request_id', A[7])
end
if A[11] ~= '' then redis.call('HSET', hkey, 'retry_of', A[11]) end
redis.call('EXPIRE', hkey, TTL)
note(id, tenant, kind, 'created', 'queued', 0, A[5], now, {'request_id', A[7]})
if here then
  note(id, tenant, kind, 'started', 'running', 0, 'starting', now, {'attempt', 1, 'worker', A[12]})
end
redis.call('EXPIRE', k_timeline(id), TTL)
redis.call('SET', lock, id, 'EX', TTL)
if idem then
  redis.call('HSET', idem, 'job', id, 'fingerprint', A[9])
  redis.call('EXPIRE', idem, TTL)
end
if limit > 0 then
  redis.call('INCR', rate)
  -- The window's key outlives its minute by a little, so a clock step cannot revive it.
  redis.call('PEXPIRE', rate, 120000)
end
list_push(tenant, id)
if here then return {6, now} end
-- Only a queue that was empty can have idle dispatchers: a busy one claims again by itself.
if redis.call('RPUSH', K_QUEUE, id) == 1 then redis.call('PUBLISH', CHANNEL, 'wake') end
return {1, now}
