-- renew: one process's heartbeat. Renews the lease of each of its runs (and, for a job older
-- than a tenth of the TTL, the TTL of its record and lock: see `aged`).
-- A: id1, claim1, id2, claim2, ...
-- Returns one code per run, in order: 'held', 'cancel_requested' (held and asked to stop),
-- 'missing', 'fenced'. A lock that expired or was never restored is taken back, so single
-- flight holds.
local now = now_ms()
local out = {}
for i = 1, #A, 2 do
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
      if old then redis.call('EXPIRE', hkey, TTL) end
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
