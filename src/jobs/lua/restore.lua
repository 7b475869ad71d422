-- restore: write back the record of a run that is alive but whose record the store lost
-- (Redis came back empty), so pollers see it again instead of a 404.
-- A: the run's job (see `run_args` in the prelude), then what the run knows of itself as a
--    named list: step, attempt, worker
-- KEYS (after the group's keys): the job's record, the group's lease index and cross-tenant
-- index (where the job is entered again), and what writing it back touches
-- (`reach_write_back`: the tenant's lock, tombstone, listing and listed jobs).
-- Returns 'restored', 'present' (the record exists), 'fenced' (something newer says
-- otherwise: `may_write_back`), or {'stale', keys…} (nothing written).
local id, claim, percent, job, i = run_args()
local live = named_args(i)
local tenant, kind = job.tenant, job.kind
local hkey = k_job(id)
if redis.call('EXISTS', hkey) == 1 then return 'present' end
local missed = reach(function()
  reach_write_back(tenant, kind)
  k_group(K_LEASES)
  k_group(K_EVERYONE)
end)
if missed then return answer_stale(missed) end
if not may_write_back(id, tenant, kind, job.created_ms) then return 'fenced' end
local lock = k_lock(tenant, kind)
local now = now_ms()
local fields = {}
for name, value in pairs(job) do fields[name] = value end
for name, value in pairs(live) do fields[name] = value end
fields.status, fields.percent, fields.claim, fields.restored = 'running', percent, claim, 1
fields.started_ms, fields.updated_ms, fields.heartbeat_ms = now, now, now
note(id, job, fields, 'restored', 'running', percent, live.step, now,
  live.attempt .. ';' .. live.worker)
write_job(hkey, fields)
redis.call('EXPIRE', hkey, TTL)
redis.call('SET', lock, id, 'EX', TTL)
redis.call('ZADD', k_group(K_LEASES), now + STALE, id)
list_push(tenant, id)
-- Back in the operators' index under its first create's time: a store that came back empty
-- lost the entry too, and a listing that met the record gone dropped it (`unlist`).
redis.call('ZADD', k_group(K_EVERYONE), '0', string.format('%013d', job.created_ms) .. '.' .. id)
return 'restored'
