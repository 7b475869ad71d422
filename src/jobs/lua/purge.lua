-- purge: remove a tenant's jobs in one step, unless one of them is active, and leave the
-- tenant's tombstone. A job that reads `lost` is not active: it goes, out of the lease index.
-- A: tenant, how many kinds, the kinds this service runs (their locks name the active jobs,
--    even one trimmed out of the listing), then the keys of the tenant's data kept beside
--    its jobs (its catalogue: hashes, pair's state, and the set naming pair's staging
--    keys), deleted in this step too; a set's members are keys that go with it
-- KEYS (after the group's keys): the tenant's listing, lane, tombstone, set of idempotency keys
-- and its locks (one a kind), the group's tenant picker, the hashes named in A, and what those
-- name: the listed jobs and the locks' holders, the idempotency keys, the keys a set among
-- the hashes names, the group's lease index when a job reads lost (learnt from a `stale`
-- answer).
-- Returns {'active', job_id} a job is queued or running and not lost (nothing changed); {'removed', n,
-- then each hash's size before} n jobs removed; or {'stale', keys…} (nothing written). Their idempotency keys and the tenant's
-- create windows go with them, and the hashes: so a job or import begun after this step
-- loses nothing to it. The tombstone (`k_gone`, this step's time and above any earlier one,
-- for the job TTL) refuses every later write of a run or an import begun before it
-- (jobs/lua/fence.lua) and writing back a record of a job created before it
-- (`may_write_back`). The tenant leaves the picker; its entries in the cross-tenant index are
-- skipped once their records are gone.
local tenant = A[1]
local kinds, hashes = {}, {}
for i = 3, #A do
  if i < 3 + tonumber(A[2]) then kinds[#kinds + 1] = A[i] else hashes[#hashes + 1] = A[i] end
end
local list = k_tenant(tenant)
local ids = listed(tenant)
for _, kind in ipairs(kinds) do
  local holder = redis.call('GET', k_lock(tenant, kind))
  if holder then ids[#ids + 1] = holder end
end
local idem = k_tenant_idem(tenant)
local now = now_ms()
local FIELDS = {'superseded_by', 'steps', unpack(LOST_FIELDS)}
-- Whether a listed job holds the delete back: queued or running, unless it reads `lost` (no
-- run holds it and none will: it goes, its lease with it, and the tombstone fences its run
-- should its process come back). A pipeline reads by its status.
local function holds_back(job)
  if job.superseded_by or not (job.status == 'queued' or job.status == 'running') then
    return false
  end
  return job.steps ~= nil or not reads_lost(job, now)
end
local missed = reach(function()
  for _, id in ipairs(ids) do
    local hkey = k_job(id)
    if reached(hkey) and reads_lost(read_job(hkey, FIELDS), now) then k_group(K_LEASES) end
  end
  k_lane(tenant)
  k_group(K_TENANTS)
  k_gone(tenant)
  for _, hash in ipairs(hashes) do
    if reached(hash) and redis.call('TYPE', hash).ok == 'set' then
      for _, name in ipairs(redis.call('SMEMBERS', hash)) do key(name) end
    end
  end
  for _, name in ipairs(redis.call('SMEMBERS', idem)) do key(name) end
end)
if missed then return answer_stale(missed) end
local lost = {}
for _, id in ipairs(ids) do
  local job = read_job(k_job(id), FIELDS)
  if holds_back(job) then return {'active', id} end
  if job.status == 'running' and not job.superseded_by then lost[#lost + 1] = id end
end
if #lost > 0 then redis.call('ZREM', k_group(K_LEASES), unpack(lost)) end
local removed = 0
for _, id in ipairs(ids) do
  removed = removed + redis.call('DEL', k_job(id))
end
for _, kind in ipairs(kinds) do redis.call('DEL', k_lock(tenant, kind)) end
redis.call('DEL', list, k_lane(tenant))
redis.call('ZREM', k_group(K_TENANTS), tenant)
local answer = {'removed', tostring(removed)}
for _, hash in ipairs(hashes) do
  -- A key of another type (pair's state, a string) goes too and counts 0; a set names
  -- keys that go with it (pair's staging keys).
  local size = 0
  local kind = redis.call('TYPE', key(hash)).ok
  if kind == 'hash' then size = redis.call('HLEN', hash) end
  if kind == 'set' then
    for _, name in ipairs(redis.call('SMEMBERS', hash)) do redis.call('UNLINK', key(name)) end
  end
  answer[#answer + 1] = tostring(size)
  -- UNLINK: the key leaves the keyspace now and Redis frees its memory in its background
  -- thread. DEL freed a 300k-product catalogue (products, enrichment, neighbours) inside
  -- this call, 1-4 s during which every other call of every replica waited.
  redis.call('UNLINK', hash)
end
for _, name in ipairs(redis.call('SMEMBERS', idem)) do redis.call('DEL', key(name)) end
redis.call('DEL', idem)
local gone = k_gone(tenant)
local stamp = math.max(now, (tonumber(redis.call('GET', gone)) or 0) + 1)
redis.call('SET', gone, stamp, 'EX', TTL)
return answer
