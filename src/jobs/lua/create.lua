-- create: create new jobs in one step — one job, or a pipeline and its steps — each taking its
-- tenant+kind lock; or name an active holder, or refuse when the ready queue is full or the
-- tenant created its share this minute. A job of its tenant's order that finds another of
-- them ahead waits for it (order.lua); a pipeline (a job with steps) is never queued itself:
-- its steps are; any other job is queued, or claimed for the worker.
-- A: n (how many jobs), then for each job its id, tenant, kind, created_by and request_id, and
--    its other fields (a named list: params, step unless it is `queued`, retry_of when it
--    retries one, in_order when it runs in its tenant's order, pipeline when it is a step,
--    steps when it is a pipeline);
--    then creates per minute (0: no limit), worker to claim a lone job for ('' for none:
--    queue it), the key its claim probes when it has one (see Returns; the arguments after
--    the worker are then odd in number), and with an idempotency key only, the key and the
--    params fingerprint (a create without one sends neither: two arguments less). The first job is the one the request named: the
--    key, the count and the answer are its.
-- KEYS (after the group's keys): the tenant's listing, its idempotency key and set of them (a
-- keyed create), its lane (an ordered job), the group's waiting set, lease index, index of
-- everyone's jobs and tenant picker, this hour's stats bucket, the job it retries, and for
-- each new job its record and lock, and the key a claim probes; and what the step learns as
-- it runs, from a `stale` answer: a lock's holder (and, taken over, what its end touches), the
-- jobs in the lane, the jobs the listing's cap trims, the spent idempotency keys it drops.
-- Returns, once created, {code, now_ms, ahead_id, ahead_kind, taken_over_id...}: code
-- 'queued' created and queued (a pipeline: its steps queued or waiting), 'claimed' created and
-- claimed for the worker (claim 1, attempt 1) because no job waited ahead of it, or 'waiting'
-- for its tenant's job ahead of it (ahead_id and ahead_kind are '' otherwise); then the stale
-- holders it took over (each ended lost here, with its pipeline). A job claimed or queued that
-- took none over is answered now_ms alone: an integer when claimed, a string when queued
-- (`created` in walks.lua); claimed, its negative when the key its claim probes does not
-- exist (read in this step: what the job's quick answer would read first, when it starts,
-- which a job claimed here does now). Else {'held', holder_id}
-- an active holder keeps a lock;
-- {'queue_full', ''}; {'replayed', job_id} the key was recorded with this job and these
-- parameters (a retry); {'key_reused', job_id} the key was recorded with other parameters;
-- {'rate_limited', ms} rate limited for ms more; {'stale', keys…} (nothing written).
-- The queue's cap counts only jobs that join the ready queue now, not those that will wait.
-- A queued holder is always active (it costs nothing while it waits and is never stale), and
-- so is a running one whose lease is stale but that recovery will run again (attempts left)
-- or end cancelled (asked to stop); any other stale holder is taken over and fenced off
-- (superseded_by).
-- Only a created job records its key and counts against the limit: a refusal changes nothing.
-- The library holds this body as `create_one(at, last)` (jobs/redis/scripts.rs): the `create`
-- function runs it once, on its arguments, creates.lua once for each request of its call.
-- The request's arguments are A[at .. last] (a call of several creates holds several).
local jobs, i = {}, at + 1
for n = 1, A[at] + 0 do
  local job, after = new_record(i + 1)
  jobs[n] = {id = A[i], job = job}
  i = after
end
local limit, worker, probe, idem_key, fingerprint = A[i] + 0, A[i + 1], '', nil, nil
if (last - i) % 2 == 0 then probe, i = A[i + 2], i + 1 end
if i + 3 <= last then idem_key, fingerprint = A[i + 2], A[i + 3] end
local first = jobs[1]
local tenant = first.job.tenant
local idem = idem_key and k_idem(tenant, first.job.kind, idem_key) or nil
-- What the refusals below read beyond what the call names: the job an idempotency key names,
-- each lock's holder, and (a full queue) the jobs in the tenant's lane. The holders and the
-- queue's length are kept for the steps below (nothing is written in between).
local queued = LONE.queued
local holders, waiting = {}, queued and queued[K_QUEUE]
if not waiting then
  waiting = redis.call('LLEN', K_QUEUE)
  if queued then queued[K_QUEUE] = waiting end
end
local missed = reach(reach_holders, idem, jobs, tenant, holders, waiting)
if missed then return answer_stale(missed) end
if idem then
  local seen = redis.call('HMGET', idem, 'job', 'fingerprint')
  -- A key outlives its job only when the job was trimmed from a full listing: it is spent.
  if seen[1] and redis.call('EXISTS', k_job(seen[1])) == 1 then
    if seen[2] == fingerprint then return {'replayed', seen[1]} end
    return {'key_reused', seen[1]}
  end
end
-- A call of several creates read TIME once for all of them (creates.lua).
local now = CALL_NOW or now_ms()
local stale = {}
for n = 1, #jobs do
  local new, holder = jobs[n], holders[n]
  if holder then
    local held = read_job(k_job(holder), {'status', 'heartbeat_ms', 'started_ms', 'created_ms',
      'percent', 'step', 'events', 'event_ms', 'tenant', 'kind', 'attempt',
      'cancel_requested_ms', 'in_order', 'waiting_for', 'pipeline'})
    if held.status == 'queued' then return {'held', holder} end
    if held.status == 'running' then
      -- A first claim writes no heartbeat: its start is its first (FIRST_CLAIM).
      local beat = held.heartbeat_ms or held.started_ms or held.created_ms
      local live = now - tonumber(beat) < STALE
      -- Asked to stop, its end is decided: the sweep ends it cancelled (it reads cancelling
      -- until then). Else it runs again while it has attempts left.
      local again = held.cancel_requested_ms or tonumber(held.attempt or '1') < MAX_ATTEMPTS
      if live or again then return {'held', holder} end
      stale[#stale + 1] = {id = holder, job = held, by = new.id}
    end
  end
end
if waiting >= MAX_QUEUED and queues(jobs, tenant) then return {'queue_full', ''} end
local window = math.floor(now / 60000)
-- The tenant's creates this minute before this one (read only under a limit).
local count = limit > 0 and creates_in(tenant, window) or 0
if limit > 0 and count >= limit then
  return {'rate_limited', int((window + 1) * 60000 - now)}
end
missed = reach(reach_create, stale, jobs, tenant, first, idem, now)
if missed then return answer_stale(missed) end
for s = 1, #stale do
  local old = stale[s]
  local fenced = {superseded_by = old.by}
  note(old.id, old.job, fenced, 'superseded', 'lost', old.job.percent, step_of(old.job), now)
  write_job(k_job(old.id), fenced)
  redis.call('ZREM', k_group(K_LEASES), old.id)
  after_end(old.id, old.job, {status = 'failed', error = 'Lost'}, now)
end
local here = worker ~= '' and waiting == 0 and #jobs == 1
-- A lone ordered job of a tenant whose listing is empty stands in no lane (LONE in order.lua);
-- a tenant's LONE head still active joins its lane before this create's jobs do.
local lone = #jobs == 1 and first.job.in_order and not first.job.steps and
  not first.job.pipeline and newest(k_tenant(tenant)) == 0
if not lone then LONE.adopt(tenant) end
-- What became of the first job: the job it waits for and its kind, or whether it was claimed.
local first_ahead, first_kind, claimed = nil, nil, false
-- Whether the tenant's listing was empty before these jobs: drop_old_counts has no old counts
-- to drop then.
local fresh = false
for n = 1, #jobs do
  local id, job = jobs[n].id, jobs[n].job
  local hkey = k_job(id)
  -- Fields left out read as their defaults: percent 0, attempt 0, updated_ms and heartbeat_ms
  -- equal to created_ms. Fewer fields keep this, the hottest script, cheap. The record is the
  -- job's own fields, added to (not a copy: `job` keeps what is read of it below).
  local record = job
  record.created_ms, record.status = now, 'queued'
  local ahead, ahead_kind = nil, nil
  if lone then
    record.in_order = LONE.mark
  elseif job.in_order then
    ahead, ahead_kind = lane_join(id, tenant, now)
  end
  if ahead then
    record.waiting_for, record.step = ahead, waiting_step(ahead_kind, ahead)
    note(id, job, record, 'created', 'queued', 0, record.step, now, 'waiting_for=' .. ahead)
    redis.call('SADD', k_group(K_WAITING), id)
  elseif job.steps then
    local ids = {}
    for k = 1, MAX_STEPS do
      local piece = job[k == 1 and 'steps' or 'steps.' .. k]
      if not piece then break end
      ids[#ids + 1] = string.match(piece, '^[^:]+:([^:]+):')
    end
    note(id, job, record, 'created', 'queued', 0, step_of(job), now,
      'steps=' .. table.concat(ids, ','))
  else
    note(id, job, record, 'created', 'queued', 0, step_of(job), now)
  end
  if here and not ahead and not job.steps then
    -- Its claim (1), attempt (1) and start (its creation) are left out: `worker` says them
    -- (FIRST_CLAIM in record.lua); and its step, the usual `starting` (USUAL_STEPS).
    record.status, record.step, record.worker = 'running', nil, worker
    note_implied_start(id, job, record, now)
    redis.call('ZADD', k_group(K_LEASES), int(now + STALE), id)
  end
  write_job(hkey, record)
  redis.call('EXPIRE', hkey, TTL_S)
  redis.call('SET', k_lock(tenant, job.kind), id, 'EX', TTL_S)
  -- The first job's push counts the create (under a limit) in the same command.
  local pushed = list_push(tenant, id, n == 1 and limit > 0 and count + 1 or nil, window)
  if n == 1 then fresh = pushed end
  index_job(tenant, id, now)
  -- Only a queue that was empty can have idle dispatchers: a busy one claims again by itself.
  if record.status == 'queued' and not ahead and not job.steps then
    local length = redis.call('RPUSH', K_QUEUE, id)
    if LONE.queued then LONE.queued[K_QUEUE] = length end
    if length == 1 then redis.call('PUBLISH', CHANNEL, WAKE) end
  end
  if n == 1 then first_ahead, first_kind, claimed = ahead, ahead_kind, record.status == 'running' end
end
-- A retry is recorded on the job it retries in this same step (a later retry overwrites it),
-- so no retry starts without it; a record gone since (expired, its tenant deleted) is not
-- made again.
local old = first.job.retry_of and k_job(first.job.retry_of)
if old and redis.call('EXISTS', old) == 1 then
  write_job(old, {retried_by = first.job.created_by or ANONYMOUS, retried_as = first.id})
end
if idem then
  redis.call('HSET', idem, 'job', first.id, 'fingerprint', fingerprint)
  redis.call('EXPIRE', idem, TTL_S)
  -- Named in the tenant's set of keys, so a delete of the tenant finds it. A key is spent once
  -- its job is gone (see above), so past twice the listing's cap the spent ones are dropped:
  -- the set stays near the number of jobs the tenant keeps, at an amortised constant cost.
  local names = k_tenant_idem(tenant)
  if redis.call('SADD', names, idem) == 1 and redis.call('SCARD', names) > 2 * CAP then
    for _, name in ipairs(redis.call('SMEMBERS', names)) do
      local owner = redis.call('HGET', key(name), 'job')
      if not owner or redis.call('EXISTS', k_job(owner)) == 0 then
        redis.call('DEL', name)
        redis.call('SREM', names, name)
      end
    end
  end
  redis.call('EXPIRE', names, TTL_S)
end
if limit > 0 and count == 0 then drop_old_counts(tenant, window, fresh) end
if first_ahead then return created('waiting', now, stale, first_ahead, first_kind) end
if claimed then
  -- Only the usual answer (none taken over) carries it: a quick answer reads it itself else.
  local absent = #stale == 0 and probe ~= '' and redis.call('EXISTS', key(probe)) == 0
  return created('claimed', absent and -now or now, stale)
end
return created('queued', now, stale)
