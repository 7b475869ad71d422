-- record: the job hash's schema on the Lua side, put in front of every job script (before the
-- prelude) and of any script on the same Redis that fences a write by a run (the catalogue's
-- products/redis/swap_table.lua). FIELDS is the same list as `Field` in jobs/redis/record.rs
-- (a test holds them equal). Scripts read and write fields by name through these helpers,
-- never by position.
--
-- Two families of names sit beside FIELDS. A value longer than 64 bytes (params, a result) is
-- written in pieces, `<field>`, `<field>.2`, `<field>.3`, … (split by `Pairs` in Rust), so the
-- hash keeps Redis's compact encoding. And the job's timeline lives in its record: event
-- `seq` is the field `@<seq>` (a lifecycle event, kept as long as the job), or for progress
-- `@tick` (the latest tick) and `@p<slot>` (a ring of PROGRESS_KEPT sampled ticks); `events`
-- counts the events noted, ticks included, and `event_ms` is the last one's time (an event is
-- never dated before the one before it), so ids only grow. An event's value is
-- `seq|type|ms since created_ms|status|percent|extra|step` (`event_value` in the prelude;
-- `Event` in jobs/redis/record.rs reads it). A pipeline's steps are pieces too, one step a
-- piece (`steps`, `steps.2`, …: `kind:id:share,`), so a script reads them one by one.
local FIELDS = {'tenant', 'kind', 'params', 'status', 'percent', 'step', 'result', 'error',
  'created_ms', 'started_ms', 'updated_ms', 'heartbeat_ms', 'finished_ms', 'cancel_requested_ms',
  'recovered_ms', 'attempt', 'claim', 'worker', 'created_by', 'request_id', 'retry_of',
  'cancelled_by', 'superseded_by', 'free_retry', 'restored', 'events', 'event_ms', 'sampled',
  'sampled_ms', 'awaited', 'in_order', 'waiting_for', 'pipeline', 'steps'}
local IS_FIELD = {}
for _, name in ipairs(FIELDS) do IS_FIELD[name] = true end

local function field_name(name)
  if IS_FIELD[name] or string.sub(name, 1, 1) == '@'
    or IS_FIELD[string.match(name, '^(.-)%.%d+$') or ''] then
    return name
  end
  error('not a job field: ' .. tostring(name))
end

-- The named fields of the job hash at `hkey`: a table keyed by name, a missing field absent.
local function read_job(hkey, names)
  for _, name in ipairs(names) do field_name(name) end
  local values = redis.call('HMGET', hkey, unpack(names))
  local job = {}
  for i, name in ipairs(names) do
    if values[i] then job[name] = values[i] end
  end
  return job
end

-- Writes the fields of `fields` (a table keyed by name) to the job hash at `hkey`.
local function write_job(hkey, fields)
  local flat = {}
  for name, value in pairs(fields) do
    flat[#flat + 1] = field_name(name)
    flat[#flat + 1] = value
  end
  if #flat > 0 then redis.call('HSET', hkey, unpack(flat)) end
end

-- The fields `is_held` reads.
local HELD_FIELDS = {'status', 'claim', 'superseded_by'}

-- Whether run `claim` still holds `job` (read with at least HELD_FIELDS): it reads
-- `running`, with this claim, and no other job took it over.
local function is_held(job, claim)
  return job.status == 'running' and job.claim == tostring(claim) and not job.superseded_by
end
