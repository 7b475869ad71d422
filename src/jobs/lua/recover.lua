-- recover: sweep runs whose lease expired (their process stopped renewing it).
-- A: how many to sweep at most in one step
-- Returns a flat list of {outcome, id}: 'r' re-queued for its next attempt, 'l' ended
-- failed/Lost after its last attempt. With MAX_ATTEMPTS 1 an expired run is left as it is:
-- it reads `lost`, and the next create of its tenant and kind takes over.
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', now, 'LIMIT', 0, tonumber(A[1]))
local out = {}
for _, id in ipairs(due) do
  redis.call('ZREM', K_LEASES, id)
  local hkey = k_job(id)
  local st = redis.call('HMGET', hkey, unpack(RUN_FIELDS))
  if st[1] == 'running' and not st[3] then
    local attempt = tonumber(st[9] or '1')
    if st[5] then
      end_cancelled(id, st[6], st[7], st[4], now)
    elseif attempt < MAX_ATTEMPTS then
      local step = 'recovered: its run was lost; waiting for a worker'
      redis.call('HSET', hkey, 'status', 'queued', 'recovered_ms', now, 'updated_ms', now,
        'step', step)
      note(id, st[6], st[7], 'requeued', 'queued', st[4], step, now, {'attempt', attempt})
      requeue(id)
      out[#out + 1] = 'r'; out[#out + 1] = id
    elseif MAX_ATTEMPTS > 1 then
      end_job(id, st[6], st[7], {'status', 'failed', 'error', 'Lost', 'step', 'failed: Lost',
        'updated_ms', now, 'finished_ms', now})
      out[#out + 1] = 'l'; out[#out + 1] = id
    else
      note(id, st[6], st[7], 'lost', 'lost', st[4], redis.call('HGET', hkey, 'step'), now)
    end
  end
end
return out
