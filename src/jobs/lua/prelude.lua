-- prelude: put in front of every job script when it is loaded (see `script` in jobs/redis.rs).
-- ARGV[1..6] are the store's settings, the same for every script; a script's own arguments
-- follow and are read from A[1..]. Keys of jobs named only inside a step (a lock's holder, a
-- trimmed job, a claimed job) are built here from the prefix: the store is one Redis
-- instance, not a Cluster. Redis::Keys builds the same names for reads and tests.
local P = ARGV[1]
local TTL = tonumber(ARGV[2])
local STALE = tonumber(ARGV[3])
local CAP = tonumber(ARGV[4])
local MAX_QUEUED = tonumber(ARGV[5])
local MAX_ATTEMPTS = tonumber(ARGV[6])
local A = {}
for i = 7, #ARGV do A[#A + 1] = ARGV[i] end

local K_QUEUE = P .. ':queue'
local K_LEASES = P .. ':leases'
local CHANNEL = P .. ':events'
local function k_job(id) return P .. ':' .. id end
local function k_lock(tenant, kind) return P .. ':lock:' .. tenant .. ':' .. kind end
local function k_tenant(tenant) return P .. ':tenant:' .. tenant end
local function k_idem(tenant, kind, key) return P .. ':idem:' .. tenant .. ':' .. kind .. ':' .. key end
local function k_rate(tenant, window) return P .. ':rate:' .. tenant .. ':' .. window end
local function k_timeline(id) return P .. ':' .. id .. ':timeline' end
local function k_tenant_events(tenant) return P .. ':tenant:' .. tenant .. ':events' end

-- How many events a job's timeline keeps: TIMELINE_CAP in jobs/timeline.rs (its reason is
-- there). `MAXLEN ~` trims whole stream nodes, so a stream may hold a few more.
local TIMELINE_CAP = 100

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ended(status)
  return status == 'done' or status == 'failed' or status == 'cancelled'
end

-- Appends an event to a job's timeline (its stream) and tells the tenant's watchers (one
-- PUBLISH on the tenant's channel), in the step that made the change. `extra` is a flat list
-- of the type's own fields. The stream's TTL is set where the job's is (create, restore,
-- renew, end_job), not here: one EXPIRE per job, not one per event.
local function note(id, tenant, kind, typ, status, percent, step, now, extra)
  local fields = {'type', typ, 'at', now, 'status', status, 'percent', percent or 0, 'step', step}
  for _, v in ipairs(extra or {}) do fields[#fields + 1] = v end
  local eid = redis.call('XADD', k_timeline(id), 'MAXLEN', '~', TIMELINE_CAP, '*', unpack(fields))
  redis.call('PUBLISH', k_tenant_events(tenant), cjson.encode({id = eid, type = typ,
    job_id = id, tenant_id = tenant, kind = kind, status = status,
    percent = tonumber(percent) or 0, step = step}))
  return eid
end

-- Deletes a job's record and its timeline.
local function drop_job(id)
  return redis.call('DEL', k_job(id), k_timeline(id))
end

-- Puts a job id at the head of its tenant's listing, trims the listing to its cap and
-- deletes the trimmed jobs that have ended (an active one keeps its record until it ends).
local function list_push(tenant, id)
  local list = k_tenant(tenant)
  if redis.call('LPUSH', list, id) > CAP then
    local gone = redis.call('LRANGE', list, CAP, -1)
    redis.call('LTRIM', list, 0, CAP - 1)
    for _, old in ipairs(gone) do
      if ended(redis.call('HGET', k_job(old), 'status')) then drop_job(old) end
    end
  end
  redis.call('EXPIRE', list, TTL)
end

-- RUN_ARGS: the scripts that may write a run's job back whole (finish, restore) take it
-- first, in this order (`run_args` in jobs/redis.rs): A[1] id, A[2] claim, A[3] tenant,
-- A[4] kind, A[5] params (JSON), A[6] created_ms, A[7] the run's last percent, A[8]
-- created_by, A[9] request_id, A[10] retry_of ('' for none). A script's own arguments
-- follow, from A[11].

-- The fields of a job written back whole that say where it came from (its audit trail).
local function run_origin(fields)
  table.insert(fields, 'created_by'); table.insert(fields, A[8])
  table.insert(fields, 'request_id'); table.insert(fields, A[9])
  if A[10] ~= '' then table.insert(fields, 'retry_of'); table.insert(fields, A[10]) end
  return fields
end

-- The fields every run write reads, in this order.
local RUN_FIELDS = {'status', 'claim', 'superseded_by', 'percent', 'cancel_requested_ms',
  'tenant', 'kind', 'started_ms', 'attempt'}

-- Whether run `claim` still holds the job: 1 yes, 0 missing, 2 ended, -1 fenced (another
-- run or job holds it). Also answers the RUN_FIELDS.
local function run_state(hkey, claim)
  local st = redis.call('HMGET', hkey, unpack(RUN_FIELDS))
  if not st[1] then return 0, st end
  if ended(st[1]) then return 2, st end
  if st[3] or st[1] ~= 'running' or st[2] ~= claim then return -1, st end
  return 1, st
end

-- Ends an active job: its final fields, its lock released if it holds it, out of the lease
-- index, its `finished` event on its timeline, and every process told (`wait=true` learns
-- of it there). `fields` always name status, step and finished_ms.
local function end_job(id, tenant, kind, fields)
  local hkey = k_job(id)
  redis.call('HSET', hkey, unpack(fields))
  redis.call('EXPIRE', hkey, TTL)
  local f = {}
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  note(id, tenant, kind, 'finished', f.status, f.percent or redis.call('HGET', hkey, 'percent'),
    f.step, f.finished_ms, f.error and {'error', f.error} or nil)
  redis.call('EXPIRE', k_timeline(id), TTL)
  local lock = k_lock(tenant, kind)
  if redis.call('GET', lock) == id then redis.call('DEL', lock) end
  redis.call('ZREM', K_LEASES, id)
  redis.call('PUBLISH', CHANNEL, 'end:' .. id)
end

local function end_cancelled(id, tenant, kind, percent, now)
  end_job(id, tenant, kind, {'status', 'cancelled', 'step', 'cancelled on request',
    'percent', percent or 0, 'updated_ms', now, 'finished_ms', now})
end

-- Puts a job back at the head of the ready queue and wakes the dispatchers.
local function requeue(id)
  redis.call('ZREM', K_LEASES, id)
  redis.call('LPUSH', K_QUEUE, id)
  redis.call('PUBLISH', CHANNEL, 'wake')
end
