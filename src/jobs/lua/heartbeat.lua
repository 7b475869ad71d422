-- heartbeat: the job's process is alive. Renews the job's TTL and its lock's lease.
-- KEYS[1] job hash  KEYS[2] lock
-- ARGV[1] job id  ARGV[2] ttl (s)
-- Returns 1 applied, 3 applied and the job was asked to stop, 0 missing, 2 ignored (job
-- finished), -1 fenced (taken over).
-- A lock that expired or was never restored is taken back (NX), so single flight holds.
local st = redis.call('HMGET', KEYS[1], 'status', 'superseded_by', 'cancel_requested_ms')
if not st[1] then return 0 end
if st[2] then return -1 end
if st[1] ~= 'queued' and st[1] ~= 'running' then return 2 end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then
  -- Another job holds the lock although this one was never taken over: it is not ours to renew.
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'heartbeat_ms', now)
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], ARGV[1], 'EX', ttl)
if st[3] then return 3 end
return 1
