-- renew: one process's heartbeat in one slot group (a heartbeat calls it once for each group
-- it has runs in, and for the first group, which holds the registry). Renews the process's
-- entry in the registry when it is named (dropping the entries of processes whose heartbeat
-- is stale; the registry itself expires once no process has beaten for the stale
-- threshold), and the lease of each of its runs in the group (and, for
-- a job older than a tenth of the TTL, the TTL of its record and lock, and of what outlives
-- it while it runs — its tenant's lane, its pipeline's record: see `aged`).
-- A: the process (`<started_ms>:<host/pid>`; '' to leave the registry alone: another group's
--    call), then id1, claim1, id2, claim2, ...
-- Returns one code per run, in order: 'held', 'cancel_requested' (held and asked to stop),
-- 'missing', 'fenced'. A lock that expired or was never restored is taken back, so single
-- flight holds.
local now = now_ms()
if A[1] ~= '' then
  redis.call('ZREMRANGEBYSCORE', K_PROCESSES, '-inf', now - STALE)
  redis.call('ZADD', K_PROCESSES, now, A[1])
  redis.call('PEXPIRE', K_PROCESSES, STALE)
end
local out = {}
for i = 2, #A, 2 do
  local id = A[i]
  local hkey = k_job(id)
  local code, job = run_state(hkey, A[i + 1])
  if code == 'held' then
    local lock = k_lock(job.tenant, job.kind)
    local holder = redis.call('GET', lock)
    if holder and holder ~= id then
      code = 'fenced'
    else
      write_job(hkey, {heartbeat_ms = now})
      local old = aged(job.created_ms, now)
      if old then
        redis.call('EXPIRE', hkey, TTL)
        if job.in_order then redis.call('EXPIRE', k_lane(job.tenant), TTL) end
        if job.pipeline then redis.call('EXPIRE', k_job(job.pipeline), TTL) end
      end
      if old or not holder then redis.call('SET', lock, id, 'EX', TTL) end
      redis.call('ZADD', K_LEASES, now + STALE, id)
      if job.cancel_requested_ms then code = 'cancel_requested' end
    end
  elseif code == 'ended' then
    code = 'fenced'
  end
  out[#out + 1] = code
end
return out
