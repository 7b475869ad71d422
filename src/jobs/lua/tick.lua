-- tick: record progress. A queued job becomes running; percent never goes down.
-- KEYS[1] job hash
-- ARGV[1] percent (0-100)  ARGV[2] step
-- Returns 1 applied, 0 missing, 2 ignored (job finished), -1 fenced (taken over).
local st = redis.call('HMGET', KEYS[1], 'status', 'percent', 'superseded_by')
if not st[1] then return 0 end
if st[3] then return -1 end
if st[1] ~= 'queued' and st[1] ~= 'running' then return 2 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local percent = math.max(tonumber(st[2]) or 0, tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'status', 'running', 'percent', percent, 'step', ARGV[2],
  'updated_ms', now, 'heartbeat_ms', now)
redis.call('HSETNX', KEYS[1], 'started_ms', now)
return 1
