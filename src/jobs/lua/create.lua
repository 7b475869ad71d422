-- create: queue a new job and take its tenant+kind lock in one step, or name the active
-- holder, or refuse when the ready queue is full or the tenant created its share this minute.
-- A: id, the job's fields (a named list: tenant, kind, params, step, created_by, request_id,
--    retry_of when it retries one), then idempotency key ('' for none), params fingerprint,
--    creates per minute (0: no limit), worker to claim it for ('' for none: queue it)
-- Returns {'queued', now_ms} created and queued; {'claimed', now_ms} created and claimed for
-- the worker (claim 1, attempt 1) because no job waited ahead of it; {'held', holder_id} an
-- active holder keeps the lock; {'queue_full', ''}; {'replayed', job_id} the key was recorded
-- with this job and these parameters (a retry); {'key_reused', job_id} the key was recorded
-- with other parameters; {'rate_limited', ms} rate limited for ms more.
-- A queued holder is always active (it costs nothing while it waits and is never stale); a
-- running one whose lease is stale is taken over and fenced off (superseded_by).
-- Only a created job records its key and counts against the limit: a refusal changes nothing.
local id = A[1]
local job, i = named_args(2)
local idem_key, fingerprint, limit, worker = A[i], A[i + 1], tonumber(A[i + 2]), A[i + 3]
local tenant, kind = job.tenant, job.kind
local idem = nil
if idem_key ~= '' then
  idem = k_idem(tenant, kind, idem_key)
  local seen = redis.call('HMGET', idem, 'job', 'fingerprint')
  -- A key outlives its job only when the job was trimmed from a full listing: it is spent.
  if seen[1] and redis.call('EXISTS', k_job(seen[1])) == 1 then
    if seen[2] == fingerprint then return {'replayed', seen[1]} end
    return {'key_reused', seen[1]}
  end
end
local now = now_ms()
local lock = k_lock(tenant, kind)
local holder = redis.call('GET', lock)
local old = nil
if holder then
  local held = read_job(k_job(holder), {'status', 'heartbeat_ms', 'created_ms', 'percent',
    'step', 'events', 'event_ms', 'tenant', 'kind'})
  if held.status == 'queued' then return {'held', holder} end
  if held.status == 'running' then
    if now - tonumber(held.heartbeat_ms or held.created_ms) < STALE then
      return {'held', holder}
    end
    old = held
  end
end
local waiting = redis.call('LLEN', K_QUEUE)
if waiting >= MAX_QUEUED then return {'queue_full', ''} end
local window = math.floor(now / 60000)
local rate = k_rate(tenant, window)
if limit > 0 and tonumber(redis.call('GET', rate) or '0') >= limit then
  return {'rate_limited', tostring((window + 1) * 60000 - now)}
end
if old then
  local fenced = {superseded_by = id}
  note(holder, old, fenced, 'superseded', 'lost', old.percent, old.step, now)
  write_job(k_job(holder), fenced)
  redis.call('ZREM', K_LEASES, holder)
end
local hkey = k_job(id)
local here = worker ~= '' and waiting == 0
-- Fields left out read as their defaults: percent 0, attempt 0, updated_ms and heartbeat_ms
-- equal to created_ms. Fewer fields keep this, the hottest script, cheap.
local record = {}
for name, value in pairs(job) do record[name] = value end
record.created_ms = now
note(id, job, record, 'created', 'queued', 0, job.step, now)
if here then
  record.status, record.step, record.started_ms = 'running', 'starting', now
  record.claim, record.attempt, record.worker = 1, 1, worker
  note(id, job, record, 'started', 'running', 0, 'starting', now, '1;' .. worker)
  redis.call('ZADD', K_LEASES, now + STALE, id)
else
  record.status = 'queued'
end
write_job(hkey, record)
redis.call('EXPIRE', hkey, TTL)
redis.call('SET', lock, id, 'EX', TTL)
if idem then
  redis.call('HSET', idem, 'job', id, 'fingerprint', fingerprint)
  redis.call('EXPIRE', idem, TTL)
  -- Named in the tenant's set of keys, so a delete of the tenant finds it. A key is spent once
  -- its job is gone (see above), so past twice the listing's cap the spent ones are dropped:
  -- the set stays near the number of jobs the tenant keeps, at an amortised constant cost.
  local names = k_tenant_idem(tenant)
  if redis.call('SADD', names, idem) == 1 and redis.call('SCARD', names) > 2 * CAP then
    for _, name in ipairs(redis.call('SMEMBERS', names)) do
      local owner = redis.call('HGET', name, 'job')
      if not owner or redis.call('EXISTS', k_job(owner)) == 0 then
        redis.call('DEL', name)
        redis.call('SREM', names, name)
      end
    end
  end
  redis.call('EXPIRE', names, TTL)
end
if limit > 0 then
  -- The window's key outlives its minute by a little, so a clock step cannot revive it.
  if redis.call('INCR', rate) == 1 then redis.call('PEXPIRE', rate, 120000) end
end
list_push(tenant, id)
if here then return {'claimed', tostring(now)} end
-- Only a queue that was empty can have idle dispatchers: a busy one claims again by itself.
if redis.call('RPUSH', K_QUEUE, id) == 1 then redis.call('PUBLISH', CHANNEL, 'wake') end
return {'queued', tostring(now)}
