-- prelude: the head of the job scripts' library, after record.lua (jobs/redis/scripts.rs
-- loads it into Redis once as a Redis Function library: each script is a function of it, so
-- this file's tables and functions are made once at load, not at every call). A call's
-- last argument is the store's settings, the same for every script (`begin` reads them); a
-- script's own arguments come before it and are read from A[1..]. Job fields travel by name:
-- a named list is a count, then name, value, … (`named_args`; `Pairs` in jobs/redis/record.rs
-- builds them). Answers are named too: each script returns a code word (`Code` in
-- jobs/redis/scripts.rs reads them). Every call names first its slot group's ready queue
-- and, on a Redis Cluster, the group's `migrating` key (`FCALL <fn> <n> <prefix>:{<tag>}:queue
-- <prefix>:{<tag>}:migrating …`): the group's base (`<prefix>:{<tag>}`, G) is read from the
-- queue, and every key name a step uses is built here from it — a lock's holder, a trimmed
-- job, a claimed job, all of one tenant or one group — so a step's keys share the one hash
-- slot a Redis Cluster routes the call to. The migrating key is never written or read: it is
-- absent, so a cluster refuses the call (ASK, TRYAGAIN) while that slot is being moved
-- between nodes instead of running it on the half of the group's keys one node holds
-- (jobs/keys.rs, `Keys::migrating`); a single Redis moves no slot, and its calls name no
-- such key (a key named costs Redis ~1,150 instructions a call). jobs/keys.rs builds the
-- same names for reads.
--
-- Every key a call touches is named in its KEYS, as Redis (and a Cluster) asks of a script:
-- the caller names, after the group's keys, the keys the step may touch (each script's header says
-- which). Every key name made here goes through `key`, the guard: a name the call did not
-- declare is an error, raised before the step's first write — each script reaches every key
-- it may touch before it writes (`reach`), and a step that meets keys it only learns as it
-- runs (a lock's holder, the next job of a lane, a pipeline's steps) answers `stale` with
-- them, having written nothing, for its caller to name them and call again.
--
-- Each script calls TIME once (now_ms). A key's TTL is set where the key is created; a
-- renewal or an end sets it again only for a job older than a tenth of the TTL (`aged`), so a
-- long job never outlives its keys and an ended one is kept at least nine tenths of the TTL.

-- The settings and the call's own arguments, set by `begin` at the start of every call (Redis
-- runs one call at a time, so each call sees only its own).
-- (TTL_S is the TTL as the call gave it, a string, for the commands that set it.)
local P, TTL, TTL_S, STALE, CAP, MAX_QUEUED, MAX_ATTEMPTS, SAMPLE_MS, A, CHANNEL
-- Whether the store is a Redis Cluster (the eighth setting, '1'): there every job was made
-- with an id naming its group, so an id naming none names no job, and is looked for in the
-- call's own slot; and a tenant's changes are published whoever listens (see `followed`).
local CLUSTER
-- The call's group: its queue (the key the call names), base, and the group's keys made from
-- it; WAKE tells the dispatchers that the group's queue has work (`wake:<tag>`). Each group's
-- names are made once and kept in GROUP_NAMES, by queue (48 groups of each prefix; emptied
-- past GROUP_NAMES_MAX, should many prefixes share a Redis).
local ANCHOR, G, WAKE
-- The call's group's names as kept in GROUP_NAMES, in `begin`'s order; [8] and [9] keep the
-- hour and name of its stats bucket last made (`k_stats`).
local GROUP
local K_QUEUE, K_LEASES, K_PROCESSES, K_EVERYONE, K_TENANTS, K_WAITING
local GROUP_NAMES, GROUP_NAMES_KEPT, GROUP_NAMES_MAX = {}, 0, 4800
-- The tenant last asked about in this call, and whether its channel had a follower.
local ASKED, HEARD

-- The keys the call declared. Its first nine after the group's keys (N1 … N9) are compared by
-- identity (Lua interns strings, so `==` compares pointers): jobs/redis/declare.rs lays out
-- every call with the keys its step touches most first (the group's lease index, waiting set
-- and stats bucket, the job's record, lock and lane, then its tenant's listing and the
-- group's index and picker), so a step's usual keys are found without a table. Any other key
-- is looked up in DECLARED, the call's KEYS as a set, made only when first needed. MISSED is
-- true while a step reaches its keys (`reach`), and then the list of the names it met that the
-- call left out once it met one.
local KEYS_, DECLARED, MISSED
local N1, N2, N3, N4, N5, N6, N7, N8, N9
-- Tenant lanes as a step's reach read them (order.lua's `reach_lane`), by key, until the step
-- changes that lane: its join or leave then reads no lane again. Made at its first use.
local LANES
-- How many queue entries this call's claims took off the head (claimed, passed to the tail,
-- or dropped): the next call names at least twice as many (`queue_head`).
local LOOKED = 0
-- Whether this call put a job of its group in the ready queue (order.lua's `release`: a job
-- that waited for the one that ended): a finish tells its caller, whose dispatcher then looks.
local RELEASED = false

-- The one name each builder below made last in this call, and what it was made of: a step
-- names its own record, lock, lane and listing many times, and each is made and checked once
-- a call. Only a declared name is kept, so a missing one is noted or refused at every use.
local MEMO_ID, MEMO_JOB, MEMO_LT, MEMO_LK, MEMO_LOCK, MEMO_TT, MEMO_TENANT
local MEMO_LNT, MEMO_LANE, MEMO_HOUR, MEMO_STATS, MEMO_CT, MEMO_CHANNEL
-- The calls this library ran (its Lua state's), and for each of the group's keys (K_LEASES, …)
-- the call that last found it declared: `k_group` checks each once a call without a table
-- made for the call.
local CALLS, NAMED = 0, {}
-- The listing last read this call (`newest`) and its highest score then, or 0 when empty
-- (kept up to date by list_push): a create's reach and its push read it once. LONE.top is the
-- job of that score (LONE: a tenant's lone ordered job, order.lua; one table for both, as the
-- library's chunk is near Lua's 200 locals).
local TOP_OF, TOP
-- (Its mark is a small integer, as `1` is: a listpack keeps either in one byte, a letter in two.)
local LONE = {mark = '2', top = nil, queued = nil}
-- (LONE.queued: in a call of several creates only (creates.lua), the length of each group's
-- ready queue as the call last read or wrote it, by queue, so its requests after the first
-- ask Redis no LLEN (~4,000 instructions each); emptied by any other change to a queue and
-- after a request whose step failed, nil in any other call.)

-- Whether the call declared `name`.
local function declared(name)
  if name == N1 or name == N2 or name == N3 or name == N4 or name == N5 or name == N6 or
    name == N7 or name == N8 or name == N9 then
    return true
  end
  if not DECLARED then
    DECLARED = {}
    for i = 1, #KEYS_ do DECLARED[KEYS_[i]] = true end
  end
  return DECLARED[name] == true
end

-- The guard every key name goes through: answers `name` when the call declared it; else,
-- while the step reaches its keys, notes it in MISSED, and otherwise raises an error naming it.
local function key(name)
  if not declared(name) then
    if MISSED == nil then
      error(redis.error_reply('ERR undeclared key ' .. name ..
        ': a job script touches only the keys its call names in KEYS'))
    end
    if MISSED == true then MISSED = {} end
    if not MISSED[name] then MISSED[name], MISSED[#MISSED + 1] = true, name end
  end
  return name
end

-- Whether the call declared `name` (noting it when not): a reach reads a key only then, so
-- it never touches one its call left out.
local function reached(name)
  -- A name a builder below kept this call is declared (the usual case: its own lock, lane).
  if name == MEMO_LOCK or name == MEMO_LANE or name == MEMO_TENANT or name == MEMO_JOB or
    declared(name) then
    return true
  end
  key(name)
  return false
end

-- Runs `walk(...)`, a step's reach: it names through `key` every key the step may touch,
-- reading (never writing) only those declared. Answers the names the call left out, or nil.
-- A step reaches its keys before its first write, and answers `stale` with them when any is
-- missing: it wrote nothing, and its caller names them too and calls again (bounded;
-- jobs/redis/declare.rs).
local function reach(walk, ...)
  MISSED = true
  walk(...)
  local missed = MISSED
  MISSED = nil
  if missed ~= true then return missed end
  return nil
end

local function answer_stale(missed) return {'stale', unpack(missed)} end

-- The settings as the last call gave them: one string (`settings_arg` in
-- jobs/redis/scripts.rs), which Lua interns, so comparing a call's settings with it costs a
-- pointer comparison, where reading them as numbers costs a strtod each (a fifth of a small
-- script's cost), and sending them as eight arguments cost Redis ~8,000 instructions a call.
local SETTINGS = nil

-- Reads a call's group from its first key, then its arguments: its last is the settings (read
-- again only when they differ from the last call's), the others the script's own (A: the
-- call's ARGV itself, its last entry removed, so no table is made a call). Its KEYS are
-- what `declared` checks names against: the first nine by identity, the rest in a set made
-- only when a name is not among them.
-- Makes the group whose ready queue is `queue` the call's group (G, K_QUEUE, K_LEASES, …).
local function enter_group(queue)
  if queue == ANCHOR then return end
  ANCHOR = queue
  local names = GROUP_NAMES[ANCHOR]
  if not names then
    local g = string.sub(ANCHOR, 1, -7)
    names = {g, 'wake:' .. string.match(g, '{([^}]*)}$'), g .. ':leases', g .. ':processes',
      g .. ':everyone', g .. ':tenants', g .. ':waiting'}
    if GROUP_NAMES_KEPT >= GROUP_NAMES_MAX then
      GROUP_NAMES, GROUP_NAMES_KEPT, NAMED = {}, 0, {}
    end
    GROUP_NAMES[ANCHOR], GROUP_NAMES_KEPT = names, GROUP_NAMES_KEPT + 1
  end
  G, WAKE, K_LEASES, K_PROCESSES, K_EVERYONE, K_TENANTS, K_WAITING = unpack(names, 1, 7)
  GROUP = names
  K_QUEUE = ANCHOR
end

-- Starts a step in the group whose ready queue is `queue`, declaring `keys` (the call's
-- KEYS), with nothing kept of the step before. A call is one step; a call of several creates
-- (creates.lua) starts each request's step so, in the request's group, and keeps the set of
-- its KEYS made for the one before (`declared`: the same KEYS).
local function enter_step(keys, queue)
  if keys ~= KEYS_ then
    KEYS_, DECLARED = keys, nil
    -- The step's own keys follow its group's queue, and on a cluster its migrating key.
    local o = CLUSTER and 2 or 1
    N1, N2, N3, N4, N5, N6, N7, N8, N9 = keys[o + 1], keys[o + 2], keys[o + 3], keys[o + 4],
      keys[o + 5], keys[o + 6], keys[o + 7], keys[o + 8], keys[o + 9]
  end
  MISSED, LANES, LOOKED, RELEASED = nil, nil, 0, false
  MEMO_ID, MEMO_LT, MEMO_LK, MEMO_TT, MEMO_LNT, MEMO_HOUR, MEMO_CT = nil, nil, nil, nil, nil,
    nil, nil
  MEMO_JOB, MEMO_LOCK, MEMO_TENANT, MEMO_LANE = nil, nil, nil, nil
  TOP_OF, CALLS = nil, CALLS + 1
  enter_group(queue)
  ASKED = nil
end

-- The call's time when a call of several creates read it once for all of them (creates.lua);
-- nil in any other call (`begin` empties it), whose step reads TIME itself (now_ms).
local CALL_NOW

local function begin(keys, args)
  CALL_NOW, LONE.queued = nil, nil
  local n = #args
  local settings = args[n]
  args[n] = nil
  if settings ~= SETTINGS then
    local ttl, stale, cap, queued, attempts, sample, cluster, prefix = string.match(settings,
      '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) ([01]) (.+)$')
    if not prefix then error(redis.error_reply('ERR the settings argument is malformed')) end
    SETTINGS = settings
    P, TTL, TTL_S, STALE = prefix, tonumber(ttl), ttl, tonumber(stale)
    CAP, MAX_QUEUED, MAX_ATTEMPTS = tonumber(cap), tonumber(queued), tonumber(attempts)
    SAMPLE_MS, CLUSTER = tonumber(sample), cluster == '1'
    CHANNEL = P .. ':events'
  end
  A = args
  -- A call's KEYS are a table of its own (the last call's is still held here, so never at
  -- the same address): its set is made anew.
  enter_step(keys, keys[1])
end
-- A job's record: under its group's base when its id names a group (a version-8 id, its
-- 15th character '8': `JobId` in jobs/mod.rs), else (made before groups, on a single Redis)
-- under the prefix.
local function job_name(id)
  if string.byte(id, 15) == 56 or CLUSTER then return G .. ':' .. id end
  return P .. ':' .. id
end
local function k_job(id)
  if id ~= MEMO_ID then
    local name = job_name(id)
    if not declared(name) then return key(name) end
    MEMO_ID, MEMO_JOB = id, name
  end
  return MEMO_JOB
end
local function k_lock(tenant, kind)
  if tenant ~= MEMO_LT or kind ~= MEMO_LK then
    local name = G .. ':lock:' .. tenant .. ':' .. kind
    if not declared(name) then return key(name) end
    MEMO_LT, MEMO_LK, MEMO_LOCK = tenant, kind, name
  end
  return MEMO_LOCK
end
local function k_tenant(tenant)
  if tenant ~= MEMO_TT then
    local name = G .. ':tenant:' .. tenant
    if not declared(name) then return key(name) end
    MEMO_TT, MEMO_TENANT = tenant, name
  end
  return MEMO_TENANT
end
-- The group's keys a step may touch, each checked once a call (NAMED, by name).
local function k_group(name)
  if NAMED[name] ~= CALLS then
    if not declared(name) then return key(name) end
    NAMED[name] = CALLS
  end
  return name
end
local function k_idem(tenant, kind, name)
  return key(G .. ':idem:' .. tenant .. ':' .. kind .. ':' .. name)
end
-- A channel, not a key: it has no slot and is not declared.
local function k_tenant_events(tenant)
  if tenant ~= MEMO_CT then
    MEMO_CT, MEMO_CHANNEL = tenant, P .. ':tenant:' .. tenant .. ':events'
  end
  return MEMO_CHANNEL
end
local function k_gone(tenant) return key(G .. ':tenant:' .. tenant .. ':gone') end
local function k_tenant_idem(tenant) return key(G .. ':tenant:' .. tenant .. ':idem') end
local function k_stats(hour)
  if hour ~= MEMO_HOUR then
    if GROUP[8] ~= hour then GROUP[8], GROUP[9] = hour, G .. ':stats:' .. int(hour) end
    local name = GROUP[9]
    if not declared(name) then return key(name) end
    MEMO_HOUR, MEMO_STATS = hour, name
  end
  return MEMO_STATS
end

-- How many sampled progress events a timeline keeps (the newest): PROGRESS_KEPT in
-- jobs/timeline.rs, where the sampling rule is explained.
local PROGRESS_KEPT = 20

-- How many of the newest jobs the cross-tenant index keeps, and how many tenants the picker
-- keeps: EVERYONE_CAP and PICKER_CAP in jobs/browse.rs.
local EVERYONE_CAP = 10000
local PICKER_CAP = 1000

-- Redis's clock in ms, read from TIME's two strings (seconds, and microseconds without
-- leading zeros) without any arithmetic on floats.
local function now_ms()
  local t = redis.call('TIME')
  -- Whole numbers, exact in a double (seconds < 2^31, microseconds < 10^6): Lua's own
  -- arithmetic reads the strings, where cutting and joining them made three strings a call.
  local us = t[2] + 0
  local now = t[1] * 1000 + (us - us % 1000) / 1000
  -- Its string is made once here and kept (`int`), so the step's writes of it format nothing.
  int(now)
  return now
end

local function ended(status)
  return status == 'done' or status == 'failed' or status == 'cancelled'
end

-- Whether a job reads `lost` (Status::derive): running, not asked to stop, and either left lost
-- by recovery (`lost_ms`, whatever MAX_ATTEMPTS is now), or its lease stale (a first claim
-- writes no heartbeat: its start is its first) with no attempt left. No run holds it and none
-- will (cancel.lua ends it at once; purge.lua deletes it).
local LOST_FIELDS = {'status', 'cancel_requested_ms', 'heartbeat_ms', 'started_ms', 'created_ms',
  'attempt', 'lost_ms'}
local function reads_lost(job, now)
  if job.status ~= 'running' or job.cancel_requested_ms then return false end
  if job.lost_ms then return true end
  local beat = job.heartbeat_ms or job.started_ms or job.created_ms
  return now - tonumber(beat) >= STALE and tonumber(job.attempt or '1') >= MAX_ATTEMPTS
end

-- Whether a job created at `created_ms` is old enough that its keys' TTL is set again.
local function aged(created_ms, now)
  return now - tonumber(created_ms or now) > TTL * 100
end

-- Reads a named list of job fields from A at index `i`: a table keyed by name, and the index
-- of the first argument after the list. The table is made with room for 16 fields (a
-- finish's outcome and what its end adds to it, a create's job): one grown key by key is
-- rehashed at each power of two (~3,000 Redis instructions a finish).
local function named_args(i)
  local n = tonumber(A[i])
  local fields = {a1 = nil, a2 = nil, a3 = nil, a4 = nil, a5 = nil, a6 = nil, a7 = nil,
    a8 = nil, a9 = nil, a10 = nil, a11 = nil, a12 = nil, a13 = nil, a14 = nil, a15 = nil,
    a16 = nil}
  for j = i + 1, i + 2 * n, 2 do
    local name = A[j]
    fields[name] = A[j + 1]
    if not FIELDS[name] then field_name(name) end
  end
  return fields, i + 1 + 2 * n
end

-- The fields a step that notes an event reads of its job (with its own).
local NOTE_FIELDS = {'tenant', 'kind', 'created_ms', 'events', 'event_ms'}

-- The tenant channels some process follows, each to when its follower last said so plus
-- WATCH_MS (Redis's clock, ms), kept in the library's Lua state (WATCHED, by prefix then
-- tenant, so a script asks without making and hashing the channel's name; WATCHED_KEPT
-- entries, expired ones dropped past WATCHED_MAX): a process's listener subscribes to a
-- channel, then names it here (`watch`, below), before any of its watchers reads the timeline
-- it resumes from, and names it again every third of WATCH_MS while it follows it. A script
-- then asks a table, where PUBSUB NUMSUB cost Redis ~10k instructions a call (two a job). A
-- channel named by nobody for WATCH_MS (its process died, or stopped following it) is
-- published to nobody no more; one still named a while after its process stopped following
-- it is published to nobody, which is harmless.
-- This state is the library's, not the keyspace's: a Redis restarted, a replica promoted or
-- a library loaded again starts it empty or old. Each state has its own EPOCH (the Redis time
-- of its first `watch`, ms), which `watch` answers: a listener that sees it change
-- (the state was made again since it last named its channels) or that named them late (more
-- than half WATCH_MS after the last time) tells its watchers to read again (`listen.rs`), as
-- after a broken subscription, since a change may have gone unpublished meanwhile.
local WATCH_MS = 15000
local WATCHED, WATCHED_KEPT, WATCHED_MAX = {}, 0, 100000
local EPOCH

-- Whether anyone follows the tenant's channel now (WATCHED, asked once a call for a tenant).
-- On a Redis Cluster no process names its channels (a watcher's subscription may be on
-- another node, and a cluster relays a PUBLISH to every node): there every change is
-- published.
local function followed(tenant, now)
  if CLUSTER then return true end
  -- No channel named since the library's state was made.
  if WATCHED_KEPT == 0 then return false end
  if tenant ~= ASKED then
    local of = WATCHED[P]
    local till = of and of[tenant]
    ASKED, HEARD = tenant, till ~= nil and till > now
  end
  return HEARD
end

-- watch: a listener follows the tenant channels `channels` (its call's arguments; no key, no
-- settings): each is followed until WATCH_MS from now (Redis's clock) unless named again.
-- Answers {WATCH_MS, EPOCH}. Writes nothing to the keyspace (so nothing is replicated).
-- A channel is `<prefix>:tenant:<tenant>:events` (`Keys::tenant_events`; a tenant id holds no
-- ':'): it is kept as WATCHED[prefix][tenant]; a name of no such form is no tenant's channel,
-- and is not kept.
local function watch(channels)
  local now = now_ms()
  EPOCH = EPOCH or int(now)
  if WATCHED_KEPT >= WATCHED_MAX then
    local kept, n = {}, 0
    for prefix, of in pairs(WATCHED) do
      for tenant, till in pairs(of) do
        if till > now then
          kept[prefix] = kept[prefix] or {}
          kept[prefix][tenant], n = till, n + 1
        end
      end
    end
    WATCHED, WATCHED_KEPT = kept, n
  end
  local till = now + WATCH_MS
  for i = 1, #channels do
    local prefix, tenant = string.match(channels[i], '^(.+):tenant:([^:]+):events$')
    if prefix then
      local of = WATCHED[prefix]
      if not of then
        of = {}
        WATCHED[prefix] = of
      end
      local was = of[tenant]
      if not was then WATCHED_KEPT = WATCHED_KEPT + 1 end
      if not was or was < till then of[tenant] = till end
    end
  end
  return {WATCH_MS, EPOCH}
end

-- Tells the tenant's watchers, when it has any (one PUBLISH), of event `seq` of job `id`, of
-- time `ms` (`job` read with NOTE_FIELDS). Its id is made only then: a number formatted costs
-- a few thousand instructions.
local function tell(id, job, typ, status, percent, step, ms, seq, now)
  if followed(job.tenant, now) then
    redis.call('PUBLISH', k_tenant_events(job.tenant), cjson.encode({id = ms .. '-' .. seq,
      type = typ, job_id = id, tenant_id = job.tenant, kind = job.kind, status = status,
      percent = tonumber(percent) or 0, step = step}))
  end
end

-- Notes event `typ` of job `id` into `fields` (the step's write of that job, keyed by name,
-- written by the caller with write_job) and tells the tenant's watchers, when it has any (one
-- PUBLISH). `job` is the record as read, with NOTE_FIELDS. `extra` is the type's own data
-- (attempt;worker for a start); what the record holds (request_id, by, error, superseded_by)
-- is read back from it. Answers the event's value. A progress tick goes to `@tick` only:
-- tick.lua samples it.
local function note(id, job, fields, typ, status, percent, step, now, extra)
  -- Numbers read from the record are strings: `+ 0` reads them without a function call.
  -- A record without `event_ms` had its last event when it was created (see below).
  local created = (job.created_ms or fields.created_ms or now) + 0
  local seq = (fields.events or job.events or 0) + 0
  local ms = (fields.event_ms or job.event_ms or created) + 0
  if ms < now then ms = now end
  fields.events = seq + 1
  -- Its string made here (`int`), as write_job will hand it to Redis: a number handed over
  -- is formatted by Redis as a float (`%.17g`, ~2,000 instructions).
  int(seq + 1)
  -- An end's event is the job's last: what dates the next one is not kept (13 bytes a job);
  -- nor is a time equal to the job's creation (a create's events: 17 bytes and a field less
  -- to write and to read).
  if typ ~= 'finished' and ms ~= created then fields.event_ms = ms end
  local at = ms - created
  -- One concatenation of kept strings (`int`), where string.format cost several sprintf calls;
  -- the percent (0 to 100) is written as '%d' would write it (truncated).
  local p = tonumber(percent) or 0
  -- A job's usual `created` and a done job's usual `finished` event are implied by its record
  -- (record.lua: what a record implies), not stored: told, and answered as nil.
  if not extra and step == DEFAULT_STEPS[typ] and ((typ == 'created' and status == 'queued' and
    p == 0 and ms == created) or (typ == 'finished' and status == 'done' and p == 100 and
    ms == now)) then
    tell(id, job, typ, status, percent, step, ms, seq, now)
    return nil
  end
  -- The step is left empty when it is the type's usual one (DEFAULT_STEPS).
  local value = int(seq) .. '|' .. (EVENT_CODES[typ] or typ) .. '|' .. int(at) .. '|' ..
    (STATUS_CODES[status] or status) .. '|' .. int(p - p % 1) .. '|' ..
    (extra or '') .. '|' .. (step ~= DEFAULT_STEPS[typ] and step or '')
  fields[typ == 'progress' and '@tick' or '@' .. int(seq)] = value
  tell(id, job, typ, status, percent, step, ms, seq, now)
  return value
end

-- A job's first claim (FIRST_CLAIM in record.lua), at its create or from the queue, whose
-- `started` event is the job's second (seq 1: only `created` before it) stores no event: its
-- record implies it (~20k instructions and ~26 bytes a job): seq 1, at its `started_ms` or
-- its creation, attempt 1 by its `worker`, at 0 % (`implied_start` is its stored form;
-- `Hash::timeline` in jobs/redis/record.rs reads it so). `fields` is the claim's write (at a
-- create, with its `created` event noted); the event's time is kept (`event_ms`) as `note`
-- keeps it, and its watchers hear the start as any other event. A step that writes such a
-- record's claim stores the event first, since the record no longer implies it then.
local function note_implied_start(id, job, fields, now)
  local created = (job.created_ms or fields.created_ms) + 0
  fields.events = (fields.events or job.events) + 1
  if now > created then fields.event_ms = now end
  tell(id, job, 'started', 'running', 0, 'starting', math.max(now, created), 1, now)
end
local function implied_start(worker, started_ms, created_ms)
  local at = started_ms and math.max(started_ms - created_ms, 0) or 0
  local value = '1|s|' .. int(at) .. '|r|0|1;' .. worker .. '|'
  return value
end

-- A tenant's listing (`k_tenant`) is one small sorted set (a listpack) holding two things:
-- its job ids, scored in the order they were listed (each above the newest, from JOBS_FROM
-- on), and its creates in the current clock minute, the member `<minute>` scored by their
-- count (always below JOBS_FROM, so below every job). One key a tenant instead of a list and
-- a key a minute: a harness job, each of its own tenant, keeps ~250 bytes less.
local JOBS_FROM = 4294967296
local JOBS_FROM_S, COUNTS_BELOW = '4294967296', '(4294967296'

-- The tenant's job ids, newest first (at most `n`; all when nil).
local function listed(tenant, n)
  return redis.call('ZREVRANGEBYSCORE', k_tenant(tenant), '+inf', JOBS_FROM_S, 'LIMIT', 0,
    n or -1)
end

-- The highest score in the tenant's listing `list` (its newest job's, from JOBS_FROM on).
local function newest(list)
  if list ~= TOP_OF then
    TOP_OF = list
    local top = redis.call('ZRANGE', list, '-1', '-1', 'WITHSCORES')
    TOP, LONE.top = tonumber(top[2]) or 0, top[1]
  end
  return TOP
end

-- The member counting a tenant's creates in clock minute `window`: the minute's number, which a
-- listpack keeps as a 4-byte integer (`~<minute>` was a 9-byte string: a listing of one job
-- then fits 64 bytes, not 80, 16 bytes a tenant). It is no job id, and a count is told from a
-- job by its score. Replicas of the version before count under `~<minute>`: while both run,
-- each reads only its own count (a tenant may create up to twice its share in that minute)
-- and each drops the other's at a minute's first create.
local function count_name(window) return int(window) end

-- How many jobs the tenant created in clock minute `window`. An empty listing holds no count:
-- its newest score (read once a call, and the create's push reads it anyway) says so, and
-- the count is not read.
local function creates_in(tenant, window)
  local list = k_tenant(tenant)
  if newest(list) == 0 then return 0 end
  return tonumber(redis.call('ZSCORE', list, count_name(window)) or '0')
end

-- After a create counted as the first of its minute (list_push wrote the count): drops the
-- counts of the minutes before, unless the listing was `fresh` (empty before this create: it
-- holds none).
local function drop_old_counts(tenant, window, fresh)
  if fresh then return end
  local list, this = k_tenant(tenant), count_name(window)
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', list, '-inf', COUNTS_BELOW)) do
    if old ~= this then redis.call('ZREM', list, old) end
  end
end

-- Puts a job id at the head of its tenant's listing, trims the listing to its cap and
-- deletes the trimmed jobs that have ended (an active one keeps its record until it ends).
-- With `count` (a create's count of its minute `window`, this create included, read by
-- creates_in), the count is written in the same ZADD (one command where a ZINCRBY was a second).
-- The listing's TTL follows its newest job. Answers whether the listing was empty before.
local function list_push(tenant, id, count, window)
  local list = k_tenant(tenant)
  local top = newest(list)
  local score = math.max(JOBS_FROM, top + 1)
  if count then
    redis.call('ZADD', list, int(score), id, int(count), count_name(window))
  else
    redis.call('ZADD', list, int(score), id)
  end
  TOP, LONE.top = score, id
  -- Jobs have distinct scores from JOBS_FROM to `score`: a listing whose scores span no more
  -- than CAP holds no more than CAP jobs, and is not counted. At most one count shares the
  -- listing with its jobs.
  if score - JOBS_FROM >= CAP and redis.call('ZCARD', list) > CAP then
    local over = redis.call('ZCOUNT', list, JOBS_FROM, '+inf') - CAP
    if over > 0 then
      local gone = redis.call('ZRANGEBYSCORE', list, JOBS_FROM, '+inf', 'LIMIT', 0, over)
      redis.call('ZREM', list, unpack(gone))
      for _, old in ipairs(gone) do
        if ended(read_job(k_job(old), {'status'}).status) then redis.call('DEL', k_job(old)) end
      end
    end
  end
  redis.call('EXPIRE', list, TTL_S)
  return top == 0
end

-- The reach (`reach`) of `n` jobs put in the tenant's listing (`list_push`): the jobs its cap
-- trims, the oldest (each is read, and deleted once ended). As list_push decides: only a
-- listing whose scores will span CAP may be trimmed, and only then is it counted.
local function reach_trim(tenant, n)
  local list = k_tenant(tenant)
  if not reached(list) or math.max(JOBS_FROM, newest(list) + 1) + n - 1 - JOBS_FROM < CAP then
    return
  end
  if redis.call('ZCARD', list) + n <= CAP then return end
  local over = redis.call('ZCOUNT', list, JOBS_FROM_S, '+inf') + n - CAP
  if over <= 0 then return end
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', list, JOBS_FROM_S, '+inf', 'LIMIT', 0, over)) do
    k_job(old)
  end
end

-- Creates since the index and the picker were last trimmed. Kept in the library's Lua state
-- between calls (one state for every replica calling this Redis; a restart or a new load of
-- the library starts it at 0 again, which only puts a trim off): each is trimmed to its cap
-- once every TRIM_EVERY creates, not at every create, so each holds at most TRIM_EVERY
-- entries beyond its cap (the picker's read stops at its cap; a listing that walks the index
-- past its cap may meet them: older jobs still kept).
local TRIM_EVERY = 64
local untrimmed = 0

-- Enters a new job in the cross-tenant index (`<ms, 13 digits>.<id>` at score 0, so names
-- order it: see jobs/browse.rs) and its tenant in the picker (scored by this create), each
-- trimmed to its cap, oldest first, every TRIM_EVERY creates.
local function index_job(tenant, id, now)
  local stamp = int(now)
  if #stamp < 13 then stamp = string.format('%013d', now) end
  redis.call('ZADD', k_group(K_EVERYONE), '0', stamp .. '.' .. id)
  redis.call('ZADD', k_group(K_TENANTS), int(now), tenant)
  untrimmed = untrimmed + 1
  if untrimmed >= TRIM_EVERY then
    untrimmed = 0
    redis.call('ZREMRANGEBYRANK', k_group(K_EVERYONE), '0', int(-(EVERYONE_CAP + 1)))
    redis.call('ZREMRANGEBYRANK', k_group(K_TENANTS), '0', int(-(PICKER_CAP + 1)))
  end
end

-- A run's arguments, for the scripts about a run's job that may write it back whole (finish,
-- restore): A[1] id, A[2] claim, A[3] the run's last percent, then the job's own fields as a
-- named list (`run_invocation` in jobs/redis/scripts.rs). Answers id, claim, percent, the
-- job's fields and the index of the script's own arguments. `run_head` answers the same
-- without reading the job's fields (the index of the script's own arguments in their place):
-- a script that needs them only to write the record back reads them then (`run_job`).
local function run_args()
  local job, i = named_args(4)
  return A[1], A[2], tonumber(A[3]), job, i
end
local function run_head()
  return A[1], A[2], tonumber(A[3]), 5 + 2 * tonumber(A[4])
end
local function run_job() return named_args(4) end

-- What `after_end` reads of a job (its place in its tenant's order and its pipeline): read
-- with the job by every step that may end it.
local ORDER_FIELDS = {'in_order', 'waiting_for', 'pipeline'}

-- The fields every run write reads.
local RUN_FIELDS = {'status', 'claim', 'superseded_by', 'percent', 'cancel_requested_ms',
  'tenant', 'kind', 'started_ms', 'attempt', 'created_ms', 'events', 'event_ms', 'awaited',
  'in_order', 'waiting_for', 'pipeline'}

-- The fields a finish reads (finish.lua): RUN_FIELDS but those no end of a held run reads —
-- its attempt and cancel request, its `started_ms` (a record written back reads the run's
-- copy), and `waiting_for`, which a running job never holds (a waiting job is released to
-- the ready queue without it before any claim) — and but those its run holds and sends
-- (tenant, kind, created_ms, pipeline: written at the job's create, never changed since):
-- `any` end's; and a done job's end (`done`) but its percent too: it ends at 100 %. Each
-- field asked of a record is a walk of its listpack, the whole of it for a field it does not
-- hold: ~2,500 Redis instructions a name, where an argument costs ~1,150. (One table for
-- both: the library's chunk is at Lua's 200 locals.)
local FINISH_FIELDS = {
  any = {'status', 'claim', 'superseded_by', 'percent', 'events', 'event_ms', 'awaited',
    'in_order'},
  done = {'status', 'claim', 'superseded_by', 'events', 'event_ms', 'awaited', 'in_order'}}

-- The fields a progress tick reads (tick.lua).
local TICK_FIELDS = {'status', 'claim', 'superseded_by', 'percent', 'cancel_requested_ms',
  'tenant', 'kind', 'created_ms', 'events', 'event_ms', 'sampled', 'sampled_ms'}

-- Whether run `claim` still holds the job: 'held', 'missing', 'ended', or 'fenced' (another
-- run or job holds it). Also answers `names` (RUN_FIELDS by default), by name.
local function run_state(hkey, claim, names)
  local job = read_job(hkey, names or RUN_FIELDS)
  if not job.status then return 'missing', job end
  if ended(job.status) then return 'ended', job end
  if not is_held(job, claim) then return 'fenced', job end
  return 'held', job
end

-- Whether a run may write back its job's record that the store lost (finish, restore): only
-- when nothing newer says otherwise — no other job holds the lock, no job of the same kind
-- created after it is in the tenant's listing, and the tenant was not deleted since it was
-- created (its tombstone; one of the same millisecond counts as since: a job created in it
-- after the delete loses at most the writing back of a lost record, one created before it
-- must never come back). Reads the listing (at most CAP records), but only on this rare path.
local function may_write_back(id, tenant, kind, created_ms)
  local holder = redis.call('GET', k_lock(tenant, kind))
  if holder and holder ~= id then return false end
  local created = tonumber(created_ms) or 0
  local gone = redis.call('GET', k_gone(tenant))
  if gone and tonumber(gone) >= created then return false end
  for _, other in ipairs(listed(tenant)) do
    local o = read_job(k_job(other), {'kind', 'created_ms'})
    if other ~= id and o.kind == kind and (tonumber(o.created_ms) or 0) > created then
      return false
    end
  end
  return true
end

-- The reach (`reach`) of writing back a lost record (`may_write_back`, then `list_push`): the
-- tenant's lock, tombstone and listing, and every job its listing holds (each is read, and
-- the oldest may be trimmed).
local function reach_write_back(tenant, kind)
  k_lock(tenant, kind)
  k_gone(tenant)
  if not reached(k_tenant(tenant)) then return end
  for _, other in ipairs(listed(tenant)) do k_job(other) end
end

-- Counts a job's end in its minute (the overview's finished figures): one HINCRBY in the
-- hour's bucket. A field made new sets the bucket's expiry, the same deadline every time: 26
-- hours after the hour began, so a 24-hour window ending in the hour's last minute finds it.
-- Each field's name is made once a minute (COUNTED, by kind and status, for COUNTED_MINUTE).
local COUNTED_MINUTE, COUNTED = nil, {}
local function count_end(kind, status, now)
  local minute = (now - now % 60000) / 60000
  local hour = (minute - minute % 60) / 60
  local bucket = k_stats(hour)
  if minute ~= COUNTED_MINUTE then COUNTED_MINUTE, COUNTED = minute, {} end
  local names = COUNTED[kind]
  if not names then
    names = {}
    COUNTED[kind] = names
  end
  local name = names[status]
  if not name then
    name = int(minute) .. ':' .. kind .. ':' .. status
    names[status] = name
  end
  if redis.call('HINCRBY', bucket, name, '1') == 1 then
    redis.call('EXPIREAT', bucket, int((hour + 26) * 3600))
  end
end

-- What follows a job's end in its tenant's order and its pipeline (defined in order.lua, put
-- after this prelude): called with the job (read with ORDER_FIELDS), its end fields and now.
local after_end

-- Ends an active job: `fields` (keyed by name; always status, step and finished_ms) and its
-- `finished` event written in one HSET, its lock released if it holds it, out of the lease
-- index, counted in its minute (`count_end`). A process waiting for it elsewhere (`awaited`,
-- set by a `wait=true` request) is told. Then what follows it in its tenant's order
-- (`after_end`). `job` was read with RUN_FIELDS.
local function end_job(id, job, fields, now)
  local hkey = k_job(id)
  -- updated_ms is not written: an ended job's reads as its finished_ms (jobs/redis/record.rs).
  note(id, job, fields, 'finished', fields.status, fields.percent or job.percent, fields.step,
    now)
  if fields.status == 'done' then
    -- A done job reads as at 100 %, `finished`, its last heartbeat at its end (record.lua:
    -- what a record implies): none is written, and its step is emptied, not left as it was.
    fields.percent, fields.heartbeat_ms, fields.step = nil, nil, ''
  end
  write_job(hkey, fields)
  if aged(job.created_ms, now) then redis.call('EXPIRE', hkey, TTL_S) end
  -- The lock taken and read in one command; in the rare case it held another job (this one's
  -- lock expired and was taken since), it is put back.
  local lock = k_lock(job.tenant, job.kind)
  local holder = redis.call('GETDEL', lock)
  if holder and holder ~= id then redis.call('SET', lock, holder, 'EX', TTL_S) end
  redis.call('ZREM', k_group(K_LEASES), id)
  if job.awaited then redis.call('PUBLISH', CHANNEL, 'end:' .. id) end
  count_end(job.kind, fields.status, fields.finished_ms)
  after_end(id, job, fields, now)
end

local function end_cancelled(id, job, fields, now)
  fields.status, fields.step = 'cancelled', 'cancelled on request'
  fields.percent, fields.finished_ms = job.percent or 0, now
  end_job(id, job, fields, now)
end

-- Puts a job back at the head of the ready queue and wakes the dispatchers.
local function requeue(id)
  redis.call('ZREM', k_group(K_LEASES), id)
  redis.call('LPUSH', K_QUEUE, id)
  if LONE.queued then LONE.queued = {} end
  redis.call('PUBLISH', CHANNEL, WAKE)
end

-- The stored fields a claim answers beside the claim and attempt it wrote: what the worker
-- is handed (`Hash::claim` reads the job's own fields, written at its create: tenant, kind,
-- params and its pieces, creator, request, the job it retries, its order, its pipeline,
-- created_ms), not the whole record (its events, status, times: ~20 strings more a claim to
-- answer, carry over RESP and read). A stored name's verdict is kept once made (emptied past
-- CLAIM_ANSWERED_MAX): events and pieces are named alike in every record.
local CLAIM_FIELDS = {[FIELDS.tenant] = true, [FIELDS.kind] = true, [FIELDS.params] = true,
  [FIELDS.created_by] = true, [FIELDS.request_id] = true, [FIELDS.retry_of] = true,
  [FIELDS.in_order] = true, [FIELDS.pipeline] = true, [FIELDS.created_ms] = true}
local PARAMS_PIECE = '^' .. FIELDS.params .. '%.%d+$'
local CLAIM_ANSWERED, CLAIM_ANSWERED_KEPT, CLAIM_ANSWERED_MAX = {}, 0, 256
local function claim_answers(stored)
  local answered = CLAIM_FIELDS[stored] or string.find(stored, PARAMS_PIECE) ~= nil
  if CLAIM_ANSWERED_KEPT >= CLAIM_ANSWERED_MAX then
    CLAIM_ANSWERED, CLAIM_ANSWERED_KEPT = {}, 0
  end
  CLAIM_ANSWERED[stored], CLAIM_ANSWERED_KEPT = answered, CLAIM_ANSWERED_KEPT + 1
  return answered
end

-- A claim's answer as `claim_one` makes it, copied once at its size (a table grown entry by
-- entry is rehashed at each power of two); kept for every claim.
local ANSWER = {}

-- Whether `flat` (a hash as HGETALL answers it) holds the field stored as `name`.
local function holds(flat, name)
  for i = 1, #flat, 2 do
    if flat[i] == name then return true end
  end
  return false
end

-- The write of a job's first claim by `worker` (FIRST_CLAIM in record.lua): no claim and no
-- attempt (1 each), and no updated_ms or heartbeat_ms (each reads as its start until written);
-- its `started` event is implied when it is the job's second (`note_implied_start`).
local function first_claim(id, job, worker, now)
  -- Room made for what note adds (its events, their time, an event): see named_args.
  local fields = {status = 'running', worker = worker, step = 'starting', started_ms = now,
    events = nil, event_ms = nil, ['@1'] = nil}
  if job.events == '1' and not job.percent then
    note_implied_start(id, job, fields, now)
  else
    note(id, job, fields, 'started', 'running', job.percent, 'starting', now, '1;' .. worker)
  end
  return fields
end

-- Takes the job at the head of the ready queue for `worker` (it runs the kinds in `runs`, a
-- set), as a leased run: `claim` is the run's fencing token (raised by every claim); `attempt`
-- counts runs against MAX_ATTEMPTS, except a run given back at shutdown (free_retry). Entries
-- whose job ended, vanished or was taken over while it waited are dropped on the way. A job
-- of a kind this worker does not run (replicas of two versions during a deploy, or a
-- rollback) goes to the tail for a worker that does, and this one looks further; once it
-- meets such a job a second time it has seen the whole queue and claims nothing.
-- A call takes only jobs whose records it named: it stops at the first entry whose record it
-- did not (its caller names the queue's head next time: `queue_head`). Each entry is taken
-- with one LPOP, not read first (LINDEX) and then taken: an entry it stops at is put back at
-- the head, where it was, which is rare (a head the caller had not seen yet).
-- Answers nil, or {id, then the fields `Hash::claim` in jobs/redis/record.rs reads, by stored
-- name: the claim and attempt this claim wrote, then the job's own fields (CLAIM_ANSWERED) as
-- stored}; and second, true when it found the queue empty.
local function claim_one(worker, runs, now)
  local first_passed = nil
  -- Checked before anything is taken off the queue: every claim's call names it.
  k_group(K_LEASES)
  while true do
    local id = redis.call('LPOP', K_QUEUE)
    if not id then return nil, true end
    local hkey = job_name(id)
    if id == first_passed or not declared(hkey) then
      redis.call('LPUSH', K_QUEUE, id)
      return nil
    end
    -- The record's name kept as k_job keeps it (it is declared): made once, not twice.
    MEMO_ID, MEMO_JOB = id, hkey
    LOOKED = LOOKED + 1
    -- The whole record in one read: what the claim decides on, and what the worker is handed.
    local job, flat = read_whole(hkey)
    if job.status == 'queued' and not job.superseded_by and not runs[job.kind] then
      redis.call('RPUSH', K_QUEUE, id)
      first_passed = first_passed or id
    elseif job.status == 'queued' and not job.superseded_by then
      local fields, claim, attempt = nil, 1, 1
      if not job.worker then
        fields = first_claim(id, job, worker, now)
      else
        -- A record with a worker and no claim has had its first claim (FIRST_CLAIM).
        attempt = tonumber(job.attempt or FIRST_CLAIM)
        if job.free_retry then
          redis.call('HDEL', hkey, field_name('free_retry'))
        else
          attempt = attempt + 1
        end
        claim = tonumber(job.claim or FIRST_CLAIM) + 1
        fields = {status = 'running', claim = claim, attempt = attempt, worker = worker,
          step = 'starting', updated_ms = now, heartbeat_ms = now,
          started_ms = job.started_ms or job.created_ms}
        if not job.claim and not holds(flat, '@1') then
          fields['@1'] = implied_start(job.worker, job.started_ms, job.created_ms)
        end
        note(id, job, fields, 'started', 'running', job.percent, 'starting', now,
          attempt .. ';' .. worker)
      end
      write_job(hkey, fields)
      redis.call('ZADD', k_group(K_LEASES), int(now + STALE), id)
      local answer = ANSWER
      answer[1], answer[2], answer[3], answer[4], answer[5] = id, FIELDS.claim, int(claim),
        FIELDS.attempt, int(attempt)
      local n = 5
      for i = 1, #flat, 2 do
        local name = flat[i]
        local answered = CLAIM_ANSWERED[name]
        if answered == nil then answered = claim_answers(name) end
        if answered then
          answer[n + 1], answer[n + 2] = name, flat[i + 1]
          n = n + 2
        end
      end
      return {unpack(answer, 1, n)}
    end
  end
end

-- The set of kinds a claim's worker runs, from A[from] on (claim.lua, finish.lua): made again
-- only when they differ from the last call's (a worker's kinds rarely change), compared one by
-- one (interned strings: pointers). A table made a call cost ~2,000 Redis instructions.
local RUNS_LISTED, RUNS = {}, {}
local function runs_of(from)
  local n = #A - from + 1
  local same = n == #RUNS_LISTED
  for k = 1, same and n or 0 do
    if A[from + k - 1] ~= RUNS_LISTED[k] then
      same = false
      break
    end
  end
  if not same then
    RUNS_LISTED, RUNS = {}, {}
    for k = 1, n do
      local kind = A[from + k - 1]
      RUNS_LISTED[k], RUNS[kind] = kind, true
    end
  end
  return RUNS
end

-- How many ids of the ready queue's head a claim answers at least, for the caller to name
-- next time. Each costs a claiming finish ~4,500 Redis instructions (named as a key, then
-- answered): 8, not 16, took 7 % off it, 4, not 8, another 4 % (`scripts/lua_cost.py`); a
-- busy queue's head moves by one or two jobs a finish (docs/performance.md: with two
-- replicas draining one queue, ~0.02 claims a job made again with 4, ~0.004 with 8).
local HEAD_NAMED = 4

-- {'head', id…}: the ready queue's first ids now (read only: the next claim's call names their
-- records), HEAD_NAMED or twice as many as this call took off it, so a queue whose head holds
-- many jobs of kinds this worker does not run is passed over in a few calls.
local function queue_head()
  local n = math.max(HEAD_NAMED, 2 * LOOKED)
  local head = redis.call('LRANGE', K_QUEUE, '0', int(n - 1))
  table.insert(head, 1, 'head')
  return head
end

-- Claims up to `n` jobs for `worker` with claim_one: a list of its answers.
local function claim_up_to(n, worker, runs, now)
  local out = {}
  while #out < n do
    local claimed = claim_one(worker, runs, now)
    if not claimed then break end
    out[#out + 1] = claimed
  end
  return out
end
