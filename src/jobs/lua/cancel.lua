-- cancel: ask an active job to stop. A running one reads `cancelling` from now on and the
-- process that runs it is told at once (pub/sub); a queued one leaves the queue and ends
-- `cancelled` at once, without ever running.
-- A: id, by (the caller's name, recorded as cancelled_by by the first request)
-- Returns 1 requested (or already requested), 2 not active (ended, or taken over), 0 missing.
local id = A[1]
local hkey = k_job(id)
local st = redis.call('HMGET', hkey, 'status', 'superseded_by', 'tenant', 'kind', 'percent',
  'step')
if not st[1] then return 0 end
if st[2] or ended(st[1]) then return 2 end
local now = now_ms()
if st[1] == 'queued' then
  redis.call('LREM', K_QUEUE, 1, id)
  redis.call('HSET', hkey, 'cancel_requested_ms', now, 'cancelled_by', A[2])
  note(id, st[3], st[4], 'cancel_requested', 'cancelling', st[5], st[6], now, {'by', A[2]})
  end_cancelled(id, st[3], st[4], st[5], now)
  return 1
end
if redis.call('HSETNX', hkey, 'cancel_requested_ms', now) == 1 then
  redis.call('HSET', hkey, 'updated_ms', now, 'cancelled_by', A[2])
  note(id, st[3], st[4], 'cancel_requested', 'cancelling', st[5], st[6], now, {'by', A[2]})
  redis.call('PUBLISH', CHANNEL, 'cancel:' .. id)
end
return 1
