-- renew: one process's heartbeat in one slot group (a heartbeat calls it once for each group
-- it has runs in, and for the first group, which holds the registry). Renews the process's
-- entry in the registry when it is named (dropping the entries of processes whose heartbeat
-- is stale; the registry itself expires once no process has beaten for the stale
-- threshold), and the lease of each of its runs in the group (and, for
-- a job older than a tenth of the TTL, the TTL of its record and lock, and of what outlives
-- it while it runs — its tenant's lane, its pipeline's record: see `aged`).
-- KEYS (after the group's keys): the process registry (when A[1] names the process), the
-- group's lease index, and for each run its record, its lock, its tenant's lane (an ordered
-- job) and its pipeline's record (a step): what a run's own fields say, which never change
-- once written, read by the caller before the call (`renew_runs` in jobs/redis/writes.rs).
-- A: the process (`<started_ms>:<host/pid>`; '' to leave the registry alone: another group's
--    call), then id1, claim1, id2, claim2, ...
-- Returns one code per run, in order: 'held', 'cancel_requested' (held and asked to stop),
-- 'missing', 'fenced'. A lock that expired or was never restored is taken back, so single
-- flight holds.
local now = now_ms()
-- Each run as read, with every key its renewal may touch reached (`key`) before any write.
local runs = {}
for i = 2, #A, 2 do
  local id = A[i]
  local run = {id = id, hkey = k_job(id)}
  run.code, run.job = run_state(run.hkey, A[i + 1])
  local job = run.job
  if run.code == 'held' then
    run.lock, run.old = k_lock(job.tenant, job.kind), aged(job.created_ms, now)
    k_group(K_LEASES)
    if run.old and job.in_order then run.lane = k_lane(job.tenant) end
    if run.old and job.pipeline then run.pipeline = k_job(job.pipeline) end
  end
  runs[#runs + 1] = run
end
if A[1] ~= '' then
  redis.call('ZREMRANGEBYSCORE', k_group(K_PROCESSES), '-inf', now - STALE)
  redis.call('ZADD', K_PROCESSES, now, A[1])
  redis.call('PEXPIRE', K_PROCESSES, STALE)
end
local out = {}
for _, run in ipairs(runs) do
  local code, id, job = run.code, run.id, run.job
  if code == 'held' then
    local holder = redis.call('GET', run.lock)
    if holder and holder ~= id then
      code = 'fenced'
    else
      write_job(run.hkey, {heartbeat_ms = now})
      if run.old then
        redis.call('EXPIRE', run.hkey, TTL)
        if run.lane then redis.call('EXPIRE', run.lane, TTL) end
        if run.pipeline then redis.call('EXPIRE', run.pipeline, TTL) end
      end
      if run.old or not holder then redis.call('SET', run.lock, id, 'EX', TTL) end
      redis.call('ZADD', K_LEASES, now + STALE, id)
      if job.cancel_requested_ms then code = 'cancel_requested' end
    end
  elseif code == 'ended' then
    code = 'fenced'
  end
  out[#out + 1] = code
end
return out
