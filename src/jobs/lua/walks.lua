-- walks: the reach (`reach` in the prelude) of create.lua and finish.lua, and a create's
-- answer, put after order.lua in front of every job script (jobs/redis/scripts.rs). Made once
-- at the library's load: a function written inside a script is a closure made at every call
-- (with an upvalue for each local it reads), ~5,000 Redis instructions a create (1.5 %).
-- Each takes as arguments what the script's walk used to read of its locals.

-- A new job's fields, read from A at `i` (`Pairs::append_origin_to` in jobs/redis/record.rs):
-- its tenant, kind, creator and request, unnamed, then a named list of its other fields
-- (`named_args`; its step is sent, and stored, only when it is not the usual `queued`; its
-- creator, when ANONYMOUS, is left out: the record implies both). Answers them in a table
-- made with room for every field a create writes (one grown field by field is made again at
-- its 1st, 2nd, 3rd, 5th and 9th field), and the index of the first argument after them.
local function new_record(i)
  local by = A[i + 2]
  if by == ANONYMOUS then by = nil end
  local job = {tenant = A[i], kind = A[i + 1], created_by = by, request_id = A[i + 3],
    params = nil, in_order = nil, step = nil, created_ms = nil, status = nil, events = nil,
    event_ms = nil, worker = nil, retry_of = nil, pipeline = nil, waiting_for = nil,
    steps = nil}
  local after = i + 5 + 2 * A[i + 4]
  for j = i + 5, after - 1, 2 do
    local name = A[j]
    job[name] = A[j + 1]
    if not FIELDS[name] then field_name(name) end
  end
  return job, after
end

-- The reach of the tenant's LONE head (order.lua's `LONE.head`, `LONE.adopt`): the record of
-- the listing's first job while it is its only one, and the lane it may be put in.
function LONE.reach(tenant)
  local list = k_tenant(tenant)
  if reached(list) and newest(list) == JOBS_FROM and LONE.top then
    -- Its lane only when it is that head: a tenant whose first job stands in no order (or
    -- has ended) names none.
    if declared(k_job(LONE.top)) and LONE.head(tenant) then k_lane(tenant) end
  end
end

-- A create's first reach: the job an idempotency key names, each new job's lock holder (kept
-- in `holders`, by the job's place), and (a full queue) the jobs in the tenant's lane.
local function reach_holders(idem, jobs, tenant, holders, waiting)
  if idem then
    local seen = redis.call('HGET', idem, 'job')
    if seen then k_job(seen) end
  end
  for n = 1, #jobs do
    local lock = k_lock(tenant, jobs[n].job.kind)
    holders[n] = reached(lock) and redis.call('GET', lock)
    if holders[n] then k_job(holders[n]) end
  end
  if waiting >= MAX_QUEUED then
    reach_lane(tenant)
    LONE.reach(tenant)
  end
end

-- Whether one of a create's jobs joins the ready queue now: asked only of a full queue (a
-- lane is read to know it).
local function queues(jobs, tenant)
  local busy = nil
  for _, new in ipairs(jobs) do
    if not new.job.steps then
      if new.job.in_order and busy == nil then busy = lane_busy(tenant) end
      if not (new.job.in_order and busy) then return true end
    end
  end
  return false
end

-- The reach of dropping the tenant's spent idempotency keys (create.lua): once its set is past
-- twice the cap, each key in it and the job it names.
local function reach_spent_keys(tenant)
  local names = k_tenant_idem(tenant)
  if not reached(names) or redis.call('SCARD', names) < 2 * CAP then return end
  for _, name in ipairs(redis.call('SMEMBERS', names)) do
    if reached(name) then
      local owner = redis.call('HGET', name, 'job')
      if owner then k_job(owner) end
    end
  end
end

-- A create's second reach: the stale holders' ends, each new job's record and lock, the lane,
-- the group's keys, the listing's trim, the job it retries and the spent idempotency keys.
local function reach_create(stale, jobs, tenant, first, idem, now)
  for s = 1, #stale do reach_end(stale[s].id, stale[s].job, now) end
  local ordered = false
  for n = 1, #jobs do
    local new = jobs[n]
    k_job(new.id)
    k_lock(tenant, new.job.kind)
    ordered = ordered or new.job.in_order
  end
  -- A tenant whose listing is empty has no lane to read (a tenant's first job, each harness
  -- job): a lane never outlives its listing — its TTL, set at each ordered create, ends no
  -- later than the listing's, set at every create; a trim keeps the newest jobs; a tenant's
  -- delete drops both — so lane_join's push finds it alone. The listing's newest score is
  -- read once a call: the push reads it anyway.
  local list = k_tenant(tenant)
  if ordered and not (reached(list) and newest(list) == 0) then reach_lane(tenant) end
  LONE.reach(tenant)
  k_group(K_WAITING)
  k_group(K_LEASES)
  k_group(K_EVERYONE)
  k_group(K_TENANTS)
  reach_trim(tenant, #jobs)
  if first.job.retry_of then k_job(first.job.retry_of) end
  if idem then reach_spent_keys(tenant) end
end

-- A created answer: the first job's outcome, then the stale holders taken over. The usual
-- answer, a job that waits for no job and took none over, is its time alone, no table: an
-- integer when it was claimed, its string when it was queued (Redis turns a table into its
-- reply after asking it for `err`, `ok`, `double`, …: ~7,000 instructions a create;
-- `usual_answer` in jobs/redis/creates.rs reads it back as {code, now}). Each entry of a
-- table costs ~800 more; jobs/redis/creates.rs reads the job ahead of a `waiting` answer only.
local function created(code, now, stale, ahead, kind)
  if not ahead and #stale == 0 then
    if code == 'claimed' then return now end
    if code == 'queued' then return int(now) end
    return {code, int(now)}
  end
  local answer = {code, int(now), ahead or '', kind or ''}
  for s = 1, #stale do answer[4 + s] = stale[s].id end
  return answer
end

-- A finish's reach: for a record to write back what that touches, and the job's end.
local function reach_finish(copy, id, st, now)
  if copy then reach_write_back(copy.tenant, copy.kind) end
  reach_end(id, copy or st, now)
end
