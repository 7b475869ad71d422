-- create: queue a new job and take its tenant+kind lock in one step, or name the active
-- holder, or refuse when the ready queue is full.
-- A: id, tenant, kind, params (JSON), step
-- Returns {1, now_ms} created; {0, holder_id} an active holder keeps the lock; {2, ''} queue full.
-- A queued holder is always active (it costs nothing while it waits and is never stale); a
-- running one whose lease is stale is taken over and fenced off (superseded_by).
local id, tenant, kind = A[1], A[2], A[3]
local now = now_ms()
local lock = k_lock(tenant, kind)
local holder = redis.call('GET', lock)
local fence_holder = false
if holder then
  local st = redis.call('HMGET', k_job(holder), 'status', 'heartbeat_ms', 'created_ms')
  if st[1] == 'queued' then return {0, holder} end
  if st[1] == 'running' then
    if now - tonumber(st[2] or st[3]) < STALE then return {0, holder} end
    fence_holder = true
  end
end
if redis.call('LLEN', K_QUEUE) >= MAX_QUEUED then return {2, ''} end
if fence_holder then
  redis.call('HSET', k_job(holder), 'superseded_by', id)
  redis.call('ZREM', K_LEASES, holder)
end
local hkey = k_job(id)
-- Fields left out read as their defaults: percent 0, attempt 0, updated_ms and heartbeat_ms
-- equal to created_ms. Fewer fields keep this, the hottest script, cheap.
redis.call('HSET', hkey, 'tenant', tenant, 'kind', kind, 'params', A[4],
  'status', 'queued', 'step', A[5], 'created_ms', now)
redis.call('EXPIRE', hkey, TTL)
redis.call('SET', lock, id, 'EX', TTL)
-- Only a queue that was empty can have idle dispatchers: a busy one claims again by itself.
if redis.call('RPUSH', K_QUEUE, id) == 1 then redis.call('PUBLISH', CHANNEL, 'wake') end
list_push(tenant, id)
return {1, now}
