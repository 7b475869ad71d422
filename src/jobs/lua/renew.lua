-- renew: one process's heartbeat. Renews the lease, TTL and lock of each of its runs.
-- A: id1, claim1, id2, claim2, ...
-- Returns one code per run, in order: 1 held, 3 held and asked to stop, 0 missing, -1 fenced.
-- A lock that expired or was never restored is taken back, so single flight holds.
local now = now_ms()
local out = {}
for i = 1, #A, 2 do
  local id = A[i]
  local hkey = k_job(id)
  local code, st = run_state(hkey, A[i + 1])
  if code == 1 then
    local lock = k_lock(st[6], st[7])
    local holder = redis.call('GET', lock)
    if holder and holder ~= id then
      code = -1
    else
      redis.call('HSET', hkey, 'heartbeat_ms', now)
      redis.call('EXPIRE', hkey, TTL)
      redis.call('EXPIRE', k_timeline(id), TTL)
      redis.call('SET', lock, id, 'EX', TTL)
      redis.call('ZADD', K_LEASES, now + STALE, id)
      if st[5] then code = 3 end
    end
  elseif code == 2 then
    code = -1
  end
  out[#out + 1] = code
end
return out
