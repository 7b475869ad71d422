-- purge: remove a tenant's jobs in one step, unless one of them is active.
-- A: tenant, then the kinds this service runs (their locks name the active jobs, even one
--    trimmed out of the listing)
-- Returns {'active', job_id} a job is queued or running (nothing changed); {'removed', n} n
-- jobs removed. A tenant's idempotency keys are left to expire: a key whose job is gone is
-- spent (create.lua).
local tenant = A[1]
local list = k_tenant(tenant)
local ids = redis.call('LRANGE', list, 0, -1)
for i = 2, #A do
  local holder = redis.call('GET', k_lock(tenant, A[i]))
  if holder then ids[#ids + 1] = holder end
end
for _, id in ipairs(ids) do
  local job = read_job(k_job(id), {'status', 'superseded_by'})
  if (job.status == 'queued' or job.status == 'running') and not job.superseded_by then
    return {'active', id}
  end
end
local removed = 0
for _, id in ipairs(ids) do
  removed = removed + redis.call('DEL', k_job(id))
end
for i = 2, #A do redis.call('DEL', k_lock(tenant, A[i])) end
redis.call('DEL', list)
return {'removed', tostring(removed)}
