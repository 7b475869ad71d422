-- cancel: ask an active job to stop. It reads `cancelling` from now on; its runner learns of
-- it from its next heartbeat, stops the work where the job allows, and finishes `cancelled`.
-- KEYS[1] job hash
-- Returns 1 requested (or already requested), 2 not active (finished, or taken over), 0 missing.
local st = redis.call('HMGET', KEYS[1], 'status', 'superseded_by')
if not st[1] then return 0 end
if st[2] or (st[1] ~= 'queued' and st[1] ~= 'running') then return 2 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HSETNX', KEYS[1], 'cancel_requested_ms', now) == 1 then
  redis.call('HSET', KEYS[1], 'updated_ms', now)
end
return 1
