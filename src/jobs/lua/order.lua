-- order: a tenant's order and its pipelines, put after the prelude in front of every job
-- script (jobs/redis/scripts.rs; the rules are in jobs/pipeline.rs and docs/api.md).
-- A tenant's ordered jobs stand in its lane (a list, oldest first): the head may run, each
-- other waits for the one before it (`waiting_for`), parked in K_WAITING instead of the ready
-- queue, so waiting costs nothing. The step that ends a job of a lane (end_job calls
-- `after_end`) releases the job behind it in the same step. A pipeline's steps stand in
-- their tenant's lane in step order; the step that ends one of them ends the pipeline when
-- it was the last, failed or was cancelled — skipping the steps after it first, so none of
-- them ever starts. The events this file notes carry their own data as `name=value;…`.
-- A lone ordered job created into its tenant's empty listing (its first job: each harness job)
-- stands in no lane: it is its lane's head by itself (`in_order` LONE, not '1'), and its create
-- and end touch no lane (4 commands a job). The tenant's next create — the listing then holds
-- that job alone, at JOBS_FROM: `LONE.head` — puts it in the lane first while it is active
-- (`LONE.adopt`), so what is created after it waits for it as before.
-- (LONE is made in the prelude: its `mark`, and the listing's newest job, `top`.)
local function k_lane(tenant)
  if tenant ~= MEMO_LNT then
    local name = G .. ':lane:' .. tenant
    if not declared(name) then return key(name) end
    MEMO_LNT, MEMO_LANE = tenant, name
  end
  return MEMO_LANE
end

-- NOTE_FIELDS and `more`: what a step reads of a job it notes an event of.
local function noted(more)
  local names = {unpack(NOTE_FIELDS)}
  for _, name in ipairs(more) do names[#names + 1] = name end
  return names
end

-- The step of a job waiting for `ahead` (a job of `kind`): pipeline::waiting_step's words.
local function waiting_step(kind, ahead)
  return string.format('waiting for %s %s… to end', kind, string.sub(ahead, 1, 8))
end

-- Whether a job read with HELD_FIELDS is queued or running and not taken over.
local function is_active(job)
  return (job.status == 'queued' or job.status == 'running') and not job.superseded_by
end

-- Puts a waiting job in the ready queue: the job it waited for (`after`) ended.
local function release(id, after, now)
  local hkey = k_job(id)
  local job = read_job(hkey, noted({'percent'}))
  local fields = {step = 'queued', updated_ms = now}
  note(id, job, fields, 'ready', 'queued', job.percent, 'queued', now, 'after=' .. after)
  write_job(hkey, fields)
  redis.call('HDEL', hkey, field_name('waiting_for'))
  redis.call('SREM', k_group(K_WAITING), id)
  if redis.call('RPUSH', K_QUEUE, id) == 1 then redis.call('PUBLISH', CHANNEL, WAKE) end
  if LONE.queued then LONE.queued = {} end
  RELEASED = true
end

-- A waiting job now waits for `ahead` (the job it waited for ended while waiting itself).
local function repoint(id, ahead, now)
  local hkey = k_job(id)
  local job = read_job(hkey, noted({'percent'}))
  local step = waiting_step(read_job(k_job(ahead), {'kind'}).kind or 'job', ahead)
  local fields = {waiting_for = ahead, step = step, updated_ms = now}
  note(id, job, fields, 'waiting', 'queued', job.percent, step, now, 'waiting_for=' .. ahead)
  write_job(hkey, fields)
end

-- The tenant's job that is its lane's head by itself (LONE) and active, and its record (read
-- with HELD_FIELDS and what lane_join reads), or nil: only the listing's first job, while it
-- is the listing's only one, may be (no job of the tenant was created since; `newest` read).
function LONE.head(tenant)
  if newest(k_tenant(tenant)) ~= JOBS_FROM or not LONE.top then return nil end
  local job = read_job(k_job(LONE.top), {'status', 'superseded_by', 'in_order', 'kind',
    'waiting_for'})
  if job.in_order == LONE.mark and is_active(job) then return LONE.top, job end
  return nil
end

-- Puts the tenant's LONE head (`LONE.head`) at the head of its lane, before a create of the
-- tenant writes anything of its own: from then on it stands there as any ordered job.
function LONE.adopt(tenant)
  local head = LONE.head(tenant)
  if not head then return end
  local lane = k_lane(tenant)
  redis.call('LPUSH', lane, head)
  redis.call('EXPIRE', lane, TTL_S)
  write_job(k_job(head), {in_order = '1'})
  if LANES then LANES[lane] = nil end
end

-- Whether an active job stands in the tenant's lane: an ordered job created now would wait.
local function lane_busy(tenant)
  if LONE.head(tenant) then return true end
  for _, other in ipairs(redis.call('LRANGE', k_lane(tenant), '0', '-1')) do
    if is_active(read_job(k_job(other), HELD_FIELDS)) then return true end
  end
  return false
end

-- Puts an ordered job at the tail of its tenant's lane. Answers the job it must wait for and
-- that job's kind, or nil when nothing of its tenant is ahead. An entry whose job is no longer
-- active (its record expired while it stood there) is dropped on the way, and a job left at
-- the head that was waiting for it is released. The lane's TTL follows its newest job. A lane
-- the job is alone in (the push made it) is not read.
local function lane_join(id, tenant, now)
  local lane = k_lane(tenant)
  local before = LANES and LANES[lane]
  if before then LANES[lane] = nil end
  local alone = redis.call('RPUSH', lane, id) == 1
  redis.call('EXPIRE', lane, TTL_S)
  if alone then return nil, nil end
  local ahead, ahead_kind = nil, nil
  for _, other in ipairs(before or redis.call('LRANGE', lane, '0', '-2')) do
    local job = read_job(k_job(other), {'status', 'superseded_by', 'kind', 'waiting_for'})
    if not is_active(job) then
      redis.call('LREM', lane, 1, other)
    else
      if not ahead and job.waiting_for then release(other, job.waiting_for, now) end
      ahead, ahead_kind = other, job.kind
    end
  end
  return ahead, ahead_kind
end

-- Takes a job out of its tenant's lane (it ended, or will not run again). The job behind it
-- then waits for the one before it, or joins the ready queue when it was at the head.
local function lane_leave(id, tenant, now)
  local lane = k_lane(tenant)
  local ids = LANES and LANES[lane]
  if ids then LANES[lane] = nil else ids = redis.call('LRANGE', lane, '0', '-1') end
  for i, other in ipairs(ids) do
    if other == id then
      -- A lane of this job alone is dropped whole (what LREM does to it, without the walk);
      -- a count is handed as a string (Redis formats a number as a float, ~2,000
      -- instructions).
      if #ids == 1 then redis.call('DEL', lane) else redis.call('LREM', lane, '1', id) end
      local behind, ahead = ids[i + 1], ids[i - 1]
      if behind and ahead then
        repoint(behind, ahead, now)
      elseif behind then
        release(behind, id, now)
      end
      return
    end
  end
end

-- The most steps a pipeline has (pieces `steps` … `steps.<MAX_STEPS>`).
local MAX_STEPS = 16

-- A pipeline's steps as its record keeps them: one piece a step, `kind:id:share,`, in order.
local function pipeline_steps(pkey)
  local names = {'steps'}
  for n = 2, MAX_STEPS do names[#names + 1] = 'steps.' .. n end
  local pieces = read_job(pkey, names)
  local steps = {}
  for _, name in ipairs(names) do
    if not pieces[name] then break end
    for kind, id, share in string.gmatch(pieces[name], '([^:,]+):([^:,]+):(%d+)') do
      steps[#steps + 1] = {kind = kind, id = id, share = tonumber(share)}
    end
  end
  return steps
end

-- The pipeline's percent: its steps' percents weighted by their shares, rounded down; and
-- its step as a reader sees it (pipeline::compose): `kind: step` of its first step not done
-- whose record is there (nil when none is).
local PERCENT_FIELDS = {'percent', 'status', 'step'}
local function pipeline_percent(steps)
  local sum, current = 0, nil
  for _, s in ipairs(steps) do
    local step = read_job(k_job(s.id), PERCENT_FIELDS)
    -- A done step stores no percent: it reads 100 (record.lua: what a record implies).
    local done = step.status == 'done'
    sum = sum + s.share * (done and 100 or math.min(tonumber(step.percent) or 0, 100))
    if not current and step.status and not done then
      current = s.kind .. ': ' .. step_of(step)
    end
  end
  return math.floor(sum / 100), current
end

-- Pipelines this script is ending: their steps' ends, in the same step, change nothing more.
local closing = {}

-- Ends the steps after `from` (all of them when nil) that are still waiting to run, last
-- first (so no skipped step is released on the way), with `why` as their step (and `by` as
-- who cancelled them, when given). A running one is left to the caller.
local function skip_steps(parent, steps, from, why, now, by)
  closing[parent] = true
  local first = 1
  for i, s in ipairs(steps) do
    if s.id == from then first = i + 1 end
  end
  for i = #steps, first, -1 do
    local job = read_job(k_job(steps[i].id), RUN_FIELDS)
    if job.status == 'queued' and not job.superseded_by then
      redis.call('LREM', K_QUEUE, 1, steps[i].id)
      if LONE.queued then LONE.queued = {} end
      end_job(steps[i].id, job, {status = 'cancelled', step = why, percent = job.percent or 0,
        finished_ms = now, cancelled_by = by}, now)
    end
  end
  closing[parent] = nil
end

-- A step of pipeline `parent` ended (`fields`: its end, at least status; error when failed).
-- Done and not the last: the pipeline goes on, `running` (the next step is released by the
-- lane).
-- Otherwise the pipeline ends: done after its last step; failed with the step's class, or
-- cancelled, once the steps after it are skipped.
local function step_ended(parent, id, kind, fields, now)
  if closing[parent] then return end
  local pkey = k_job(parent)
  local p = read_job(pkey, noted({'status', 'percent', 'awaited', 'cancelled_by',
    'cancel_requested_ms', 'in_order', 'waiting_for', 'pipeline'}))
  if not p.status or ended(p.status) then return end
  local steps = pipeline_steps(pkey)
  local last = steps[#steps] and steps[#steps].id == id
  local status = fields.status
  -- A step that ended done after its pipeline was asked to stop (it finished before it read
  -- the request): the steps after it were skipped, so the pipeline ends cancelled now; the
  -- last one leaves nothing skipped, so the pipeline ends done (docs/api.md, Cancel).
  if status == 'done' and not last then
    status = 'running'
    if p.cancel_requested_ms then status = 'cancelled' end
  end
  if status == 'failed' then
    skip_steps(parent, steps, id, 'skipped: the pipeline failed in ' .. kind, now)
  elseif status == 'cancelled' then
    skip_steps(parent, steps, id, 'skipped: the pipeline was cancelled', now)
  end
  local percent = pipeline_percent(steps)
  local step = kind .. ': ' .. fields.status
  local pf = {percent = percent, step = step, updated_ms = now}
  note(parent, p, pf, 'step_ended', status, percent, step, now,
    'step_job_id=' .. id .. ';step_kind=' .. kind .. ';step_status=' .. fields.status)
  if status == 'running' then
    write_job(pkey, pf)
    return
  end
  pf.status, pf.finished_ms, pf.step = status, now, 'finished'
  if status == 'failed' then
    pf.error = fields.error
    pf.step = 'failed in ' .. kind .. ': ' .. tostring(fields.error)
  elseif status == 'cancelled' then
    local by = read_job(k_job(id), {'cancelled_by', 'cancel_requested_ms'})
    pf.step = 'cancelled on request'
    pf.cancelled_by = p.cancelled_by or by.cancelled_by
    pf.cancel_requested_ms = p.cancel_requested_ms or by.cancel_requested_ms or now
  end
  end_job(parent, p, pf, now)
end

-- Called by end_job once a job has ended, and by the steps that decide a job will not run
-- again without ending it (`fields` then says how it counts: failed, `Lost`): it leaves the
-- waiting set, its pipeline hears of it, and it leaves its tenant's lane. `job` was read
-- with ORDER_FIELDS, tenant and kind.
after_end = function(id, job, fields, now)
  if job.waiting_for then
    redis.call('SREM', k_group(K_WAITING), id)
    redis.call('HDEL', k_job(id), field_name('waiting_for'))
  end
  if job.pipeline then step_ended(job.pipeline, id, job.kind, fields, now) end
  if job.in_order and job.in_order ~= LONE.mark then lane_leave(id, job.tenant, now) end
end

-- The reach (`reach` in the prelude) of a job's end and what follows it: names every key
-- `end_job` and `after_end` may touch — its record and lock, the group's lease index, waiting
-- set and stats bucket of this hour (the queue is the call's first key), its tenant's lane
-- and every job standing in it (one is released or repointed), and for a step or a pipeline
-- the pipeline's record and lock and each step's record and lock (steps are skipped or
-- ended with it). `job` was read with RUN_FIELDS (and `steps`, for a pipeline). A lane or a
-- pipeline record the call left out is not read: its names come with the next call.
local function reach_lane(tenant)
  local lane = k_lane(tenant)
  if not reached(lane) then return end
  local ids = redis.call('LRANGE', lane, '0', '-1')
  LANES = LANES or {}
  LANES[lane] = ids
  for _, other in ipairs(ids) do k_job(other) end
end

local function reach_pipeline(parent)
  local pkey = k_job(parent)
  if not reached(pkey) then return end
  local p = read_job(pkey, {'tenant', 'kind'})
  if not p.tenant then return end
  k_lock(p.tenant, p.kind)
  for _, s in ipairs(pipeline_steps(pkey)) do
    k_job(s.id)
    k_lock(p.tenant, s.kind)
  end
  reach_lane(p.tenant)
end

local function reach_end(id, job, now)
  k_job(id)
  k_lock(job.tenant, job.kind)
  k_group(K_LEASES)
  k_group(K_WAITING)
  k_stats(math.floor(now / 3600000))
  if job.in_order and job.in_order ~= LONE.mark then reach_lane(job.tenant) end
  if job.pipeline then reach_pipeline(job.pipeline) end
  if job.steps then reach_pipeline(id) end
end

-- Asks a pipeline to stop (cancel.lua, for a job with steps; `p` read as cancel.lua reads a
-- job): its running step is asked to stop, the steps not started are skipped at once; it ends
-- cancelled when its running step does, or at once when none was running.
local function cancel_pipeline(id, p, by, now)
  local pkey = k_job(id)
  local steps = pipeline_steps(pkey)
  local fields = {cancel_requested_ms = now, cancelled_by = by, updated_ms = now}
  -- Its event carries what the pipeline reads when asked (its record keeps 0 % and `queued`
  -- while its steps run: the reader composes them).
  local percent, step = pipeline_percent(steps)
  percent = math.max(percent, tonumber(p.percent) or 0)
  note(id, p, fields, 'cancel_requested', 'cancelling', percent, step or step_of(p), now)
  write_job(pkey, fields)
  skip_steps(id, steps, nil, 'skipped: the pipeline was cancelled', now, by)
  local running = false
  for _, s in ipairs(steps) do
    local hkey = k_job(s.id)
    local job = read_job(hkey, noted({'status', 'superseded_by', 'percent', 'step',
      'cancel_requested_ms'}))
    if job.status == 'running' and not job.superseded_by then
      running = true
      if not job.cancel_requested_ms then
        local asked = {cancel_requested_ms = now, cancelled_by = by, updated_ms = now}
        note(s.id, job, asked, 'cancel_requested', 'cancelling', job.percent, step_of(job),
          now)
        write_job(hkey, asked)
        redis.call('PUBLISH', CHANNEL, 'cancel:' .. s.id)
      end
    end
  end
  if not running then
    end_job(id, read_job(pkey, RUN_FIELDS), {status = 'cancelled',
      step = 'cancelled on request', percent = pipeline_percent(steps), finished_ms = now}, now)
  end
end
