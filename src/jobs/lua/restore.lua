-- restore: write back the record of a job that is still alive but whose record the store
-- lost (Redis came back empty), so pollers see it again instead of a 404.
-- KEYS[1] job hash  KEYS[2] lock  KEYS[3] tenant list
-- ARGV[1] job id  ARGV[2] tenant  ARGV[3] kind  ARGV[4] params (JSON)  ARGV[5] created_ms
-- ARGV[6] status (queued|running)  ARGV[7] percent  ARGV[8] step  ARGV[9] ttl (s)  ARGV[10] list cap
-- Returns 1 restored, 2 ignored (the record exists), -1 fenced (a newer job holds the lock).
if redis.call('EXISTS', KEYS[1]) == 1 then return 2 end
local lock = redis.call('GET', KEYS[2])
if lock and lock ~= ARGV[1] then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[9])
redis.call('HSET', KEYS[1], 'tenant', ARGV[2], 'kind', ARGV[3], 'params', ARGV[4],
  'status', ARGV[6], 'percent', ARGV[7], 'step', ARGV[8], 'created_ms', ARGV[5],
  'updated_ms', now, 'heartbeat_ms', now, 'restored', 1)
if ARGV[6] == 'running' then redis.call('HSET', KEYS[1], 'started_ms', now) end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], ARGV[1], 'EX', ttl)
if redis.call('LPUSH', KEYS[3], ARGV[1]) > tonumber(ARGV[10]) then
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[10]) - 1)
end
redis.call('EXPIRE', KEYS[3], ttl)
return 1
