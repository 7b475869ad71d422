-- prelude: put in front of every job script when it is loaded (after record.lua; see
-- jobs/redis/scripts.rs). ARGV[1..6] are the store's settings, the same for every script; a
-- script's own arguments follow and are read from A[1..]. Job fields travel by name: a named
-- list is a count, then name, value, … (`named_args`; `Pairs` in jobs/redis/record.rs builds
-- them). Answers are named too: each script returns a code word (`Code` in
-- jobs/redis/scripts.rs reads them). Keys of jobs named only inside a step (a lock's holder, a
-- trimmed job, a claimed job) are built here from the prefix: the store is one Redis instance,
-- not a Cluster. jobs/keys.rs builds the same names for reads and tests.
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

-- Reads a named list of job fields from A at index `i`: a table keyed by name, and the index
-- of the first argument after the list.
local function named_args(i)
  local n = tonumber(A[i])
  local fields = {}
  for j = i + 1, i + 2 * n, 2 do fields[field_name(A[j])] = A[j + 1] end
  return fields, i + 1 + 2 * n
end

-- `names` of `job` that it has, as a flat name, value, … list (an answer Rust reads by name).
local function flat_fields(job, names)
  local out = {}
  for _, name in ipairs(names) do
    if job[name] then
      out[#out + 1] = name
      out[#out + 1] = tostring(job[name])
    end
  end
  return out
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
      if ended(read_job(k_job(old), {'status'}).status) then drop_job(old) end
    end
  end
  redis.call('EXPIRE', list, TTL)
end

-- A run's arguments, for the scripts about a run's job that may write it back whole (finish,
-- restore): A[1] id, A[2] claim, A[3] the run's last percent, then the job's own fields as a
-- named list (`run_args` in jobs/redis/scripts.rs). Answers id, claim, percent, the job's
-- fields and the index of the script's own arguments.
local function run_args()
  local job, i = named_args(4)
  return A[1], A[2], tonumber(A[3]), job, i
end

-- The fields every run write reads.
local RUN_FIELDS = {'status', 'claim', 'superseded_by', 'percent', 'cancel_requested_ms',
  'tenant', 'kind', 'started_ms', 'attempt'}

-- Whether run `claim` still holds the job: 'held', 'missing', 'ended', or 'fenced' (another
-- run or job holds it). Also answers the RUN_FIELDS, by name.
local function run_state(hkey, claim)
  local job = read_job(hkey, RUN_FIELDS)
  if not job.status then return 'missing', job end
  if ended(job.status) then return 'ended', job end
  if not is_held(job, claim) then return 'fenced', job end
  return 'held', job
end

-- Ends an active job: its final fields, its lock released if it holds it, out of the lease
-- index, its `finished` event on its timeline, and every process told (`wait=true` learns
-- of it there). `fields` (keyed by name) always name status, step and finished_ms.
local function end_job(id, tenant, kind, fields)
  local hkey = k_job(id)
  write_job(hkey, fields)
  redis.call('EXPIRE', hkey, TTL)
  note(id, tenant, kind, 'finished', fields.status,
    fields.percent or read_job(hkey, {'percent'}).percent, fields.step, fields.finished_ms,
    fields.error and {'error', fields.error} or nil)
  redis.call('EXPIRE', k_timeline(id), TTL)
  local lock = k_lock(tenant, kind)
  if redis.call('GET', lock) == id then redis.call('DEL', lock) end
  redis.call('ZREM', K_LEASES, id)
  redis.call('PUBLISH', CHANNEL, 'end:' .. id)
end

local function end_cancelled(id, tenant, kind, percent, now)
  end_job(id, tenant, kind, {status = 'cancelled', step = 'cancelled on request',
    percent = percent or 0, updated_ms = now, finished_ms = now})
end

-- Puts a job back at the head of the ready queue and wakes the dispatchers.
local function requeue(id)
  redis.call('ZREM', K_LEASES, id)
  redis.call('LPUSH', K_QUEUE, id)
  redis.call('PUBLISH', CHANNEL, 'wake')
end
