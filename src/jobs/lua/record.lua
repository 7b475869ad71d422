-- record: the job hash's schema on the Lua side, put in front of every job script (before the
-- prelude) and of any script on the same Redis that fences a write by a run (the catalogue's
-- products/redis/swap_table.lua). FIELDS is the same list as `Field` in jobs/redis/record.rs
-- (a test holds them equal). Scripts read and write fields by name through these helpers,
-- never by position.
--
-- Each field has a name, which scripts, named lists and code use, and a stored name of one or
-- two characters, which is what the hash holds (FIELDS maps one to the other; `field_name`
-- turns a name into its stored name): a short job's record has ~30 fields, so long names were
-- a third of its bytes.
--
-- Two families of names sit beside FIELDS. A value longer than 64 bytes (params, a result) is
-- written in pieces, `<field>`, `<field>.2`, `<field>.3`, … (split by `Pairs` in Rust), so the
-- hash keeps Redis's compact encoding. And the job's timeline lives in its record: event
-- `seq` is the field `@<seq>` (a lifecycle event, kept as long as the job), or for progress
-- `@tick` (the latest tick) and `@p<slot>` (a ring of PROGRESS_KEPT sampled ticks); `events`
-- counts the events noted, ticks included, and `event_ms` is the last one's time (an event is
-- never dated before the one before it), so ids only grow; a job's last event, `finished`,
-- leaves it as it was (no event follows an end, so nothing reads it again). An event's value is
-- `seq|type|ms since created_ms|status|percent|extra|step` (`note` in the prelude; `Hash::event`
-- in jobs/redis/record.rs reads it; the step empty when it is its type's DEFAULT_STEPS),
-- its type and status written as their codes
-- (EVENT_CODES, STATUS_CODES; a word without a code is written whole). A pipeline's steps are
-- pieces too, one step a piece (`steps`, `steps.2`, …: `kind:id:share,`), so a script reads
-- them one by one.
local FIELDS = {tenant = 't', kind = 'k', params = 'p', status = 's', percent = '%',
  step = 'sp', result = 'r', error = 'e', created_ms = 'c', started_ms = 'b', updated_ms = 'u',
  heartbeat_ms = 'h', finished_ms = 'f', cancel_requested_ms = 'x', recovered_ms = 'rq',
  attempt = 'a', claim = 'cl', worker = 'w', created_by = 'by', request_id = 'id',
  retry_of = 'ro', cancelled_by = 'xb', retried_by = 'rb', retried_as = 'ra',
  superseded_by = 'sb', free_retry = 'fr', lost_ms = 'lm',
  restored = 'rs', events = 'n', event_ms = 'nt', sampled = 'sn', sampled_ms = 'sm',
  awaited = 'aw', in_order = 'io', waiting_for = 'wf', pipeline = 'pl', steps = 'st'}

-- The codes of event types and statuses in a stored event: EVENT_CODES and STATUS_CODES in
-- jobs/redis/record.rs are the same lists.
local EVENT_CODES = {created = 'c', started = 's', progress = 'p', cancel_requested = 'x',
  released = 'g', requeued = 'q', lost = 'l', restored = 'r', superseded = 'o', finished = 'f'}
local STATUS_CODES = {queued = 'q', running = 'r', done = 'd', failed = 'f', cancelled = 'c',
  cancelling = 'x', lost = 'l'}
-- The step an event of each type usually carries: an event whose step is its type's is stored
-- with an empty step (~22 bytes a short job's timeline; these types never note an empty one,
-- and a reader older than this shows it empty rather than failing). DEFAULT_STEPS in
-- jobs/redis/record.rs is the same list.
local DEFAULT_STEPS = {created = 'queued', started = 'starting', finished = 'finished'}
-- The creator a record leaves out (`created_by`, 15 bytes of a short job's listpack): a
-- caller without a token (ANONYMOUS in jobs/redis/record.rs, the same word), the usual one.
local ANONYMOUS = 'anonymous'
-- The step a record implies when it stores none: its status's usual one (USUAL_STEPS in
-- jobs/redis/record.rs, the same list). A create stores no `queued`, a claim at its create no
-- `starting` (a field of the hottest script's HSET, ~4k Redis instructions); a step that reads
-- a job's step reads it with its status, through step_of.
local USUAL_STEPS = {queued = 'queued', running = 'starting'}
local function step_of(job) return job.step or USUAL_STEPS[job.status] or '' end

-- The stored name of field `name`, or of a piece of it (`<name>.<n>`); an event field (`@…`)
-- is stored as named.
-- A piece's stored name is kept once made (PIECES, emptied past PIECES_MAX): a result or
-- params of two pieces names `<field>.2` in every finish or create, and a pattern match costs
-- a few thousand instructions.
local PIECES, PIECES_KEPT, PIECES_MAX = {}, 0, 64
local function field_name(name)
  local stored = FIELDS[name] or PIECES[name]
  if stored then return stored end
  if string.byte(name, 1) == 64 then return name end
  local base, n = string.match(name, '^(.-)(%.%d+)$')
  if not (base and FIELDS[base]) then error('not a job field: ' .. tostring(name)) end
  stored = FIELDS[base] .. n
  if PIECES_KEPT >= PIECES_MAX then PIECES, PIECES_KEPT = {}, 0 end
  PIECES[name], PIECES_KEPT = stored, PIECES_KEPT + 1
  return stored
end

-- The stored names of each list of names read_job was given, by list: made once for the
-- library's own lists; a list made for one call leaves it with that call (weak keys; made at
-- first use, since a library's load may not call setmetatable).
local STORED_NAMES = nil

-- The named fields of the job hash at `hkey`: a table keyed by name, a missing field absent.
local function read_job(hkey, names)
  if not STORED_NAMES then STORED_NAMES = setmetatable({}, {__mode = 'k'}) end
  local stored = STORED_NAMES[names]
  if not stored then
    stored = {}
    for i, name in ipairs(names) do stored[i] = field_name(name) end
    STORED_NAMES[names] = stored
  end
  local values = redis.call('HMGET', hkey, unpack(stored))
  -- Made with room for 16 fields (a finish reads 11): one grown field by field is made again
  -- at its 1st, 2nd, 3rd, 5th and 9th (~2,500 Redis instructions a finish).
  local job = {a1 = nil, a2 = nil, a3 = nil, a4 = nil, a5 = nil, a6 = nil, a7 = nil,
    a8 = nil, a9 = nil, a10 = nil, a11 = nil, a12 = nil, a13 = nil, a14 = nil, a15 = nil,
    a16 = nil}
  for i, name in ipairs(names) do
    if values[i] then job[name] = values[i] end
  end
  return job
end

-- The name each stored name stands for (FIELDS turned around), made at its first use: a
-- Function library's load may not call `pairs` (Redis 7.0).
local STORED_AS = nil
local function stored_as()
  if not STORED_AS then
    STORED_AS = {}
    for name, stored in pairs(FIELDS) do STORED_AS[stored] = name end
  end
  return STORED_AS
end

-- The whole job hash at `hkey` in one read: a table of its fields keyed by name (pieces and
-- events left out), and the hash as HGETALL answers it (stored name, value, …).
local function read_whole(hkey)
  local flat = redis.call('HGETALL', hkey)
  local names = stored_as()
  local job = {}
  for i = 1, #flat, 2 do
    local name = names[flat[i]]
    if name then job[name] = flat[i + 1] end
  end
  return job, flat
end

-- The decimal string of integer `n`. Every number a script hands Redis or concatenates is
-- made a string; string.format's integer path does it several times cheaper than the float
-- formatting `tostring`, `..` and redis.call give a number (measured: a tenth of a job's
-- Redis CPU went to formatting numbers), so values bound for Redis go through here; a number
-- with a fraction (none is written today) keeps Lua's own formatting.
-- Each integer's string is kept once made (INTS, emptied past INTS_MAX): a step writes the
-- same few (its `now` in several fields, a claim, an attempt, an event's number) many times.
-- Kept small: the collector walks what the library keeps at every cycle (1,024 kept cost 1.3 %
-- more instructions a job than 64, and ~220 KB of Lua memory).
local INTS, INTS_KEPT, INTS_MAX = {}, 0, 64
local function int(n)
  local s = INTS[n]
  if s then return s end
  if n % 1 ~= 0 then return tostring(n) end
  s = string.format('%d', n)
  if INTS_KEPT >= INTS_MAX then INTS, INTS_KEPT = {}, 0 end
  INTS[n], INTS_KEPT = s, INTS_KEPT + 1
  return s
end

-- Writes the fields of `fields` (a table keyed by name; numbers are integers) to the job hash
-- at `hkey`.
-- The HSET's arguments are put in one table kept for every write (FLAT: Redis copies them),
-- not in a table made, grown and collected at each write. A number is handed over as the
-- string `int` kept for it, else as the number, which Redis writes with `%.17g`: the same
-- digits for an integer below 10^17 (every number a record holds). No `type` or `int` call a
-- field: in Redis's Lua a function call costs ~500 instructions, and a create writes 17 fields.
local FLAT = {}
local function write_job(hkey, fields)
  local flat, n = FLAT, 0
  for name, value in pairs(fields) do
    flat[n + 1] = FIELDS[name] or field_name(name)
    flat[n + 2] = INTS[value] or value
    n = n + 2
  end
  if n > 0 then redis.call('HSET', hkey, unpack(flat, 1, n)) end
end

-- The fields `is_held` reads.
local HELD_FIELDS = {'status', 'claim', 'superseded_by'}

-- A job's first claim is written without `claim` and `attempt` (create.lua's claim at its create,
-- which writes no `started_ms` either, and the prelude's `claim_one`): a record with a `worker`
-- and no `claim` has had one claim, and reads as claim 1, attempt 1, started at its
-- `started_ms`, or when it was created when it has none (`Hash::snapshot` in
-- jobs/redis/record.rs reads it alike). Every later claim writes all three. So a running
-- record without a claim holds claim 1.
local FIRST_CLAIM = '1'

-- What a record implies rather than stores (`Hash::snapshot` and `Hash::timeline` in
-- jobs/redis/record.rs read them so): its `created` event when it is the usual one
-- (`0|c|0|q|0||`: at its creation, queued, 0 %, its usual step, nothing more; not in a record
-- its run wrote back, whose timeline starts anew), and a done job's
-- `finished` event when it is the usual one (`<n - 1>|f|<finished - created>|d|100||`: the
-- job's last, at its finished_ms). A done job reads as at 100 %, step `finished`, last
-- heartbeat at its finished_ms: its finish writes none of the three (its step emptied).

-- Whether run `claim` still holds `job` (read with at least HELD_FIELDS): it reads
-- `running`, with this claim, and no other job took it over.
local function is_held(job, claim)
  return job.status == 'running' and (job.claim or FIRST_CLAIM) == tostring(claim) and
    not job.superseded_by
end
