-- finish: end a job and release its lock if the lock still holds this job, in one step.
-- KEYS[1] job hash  KEYS[2] lock  KEYS[3] tenant list
-- ARGV[1] job id  ARGV[2] status (done|failed|cancelled)  ARGV[3] result (JSON, "" for none;
--   a failed job may carry its partial report here)
-- ARGV[4] error class ("" for none)  ARGV[5] step  ARGV[6] ttl (s)
-- ARGV[7] tenant  ARGV[8] kind  ARGV[9] params (JSON)  ARGV[10] created_ms  ARGV[11] list cap
-- ARGV[12] the job's last reported percent (a failed job keeps the higher of it and the stored one)
-- Returns 1 applied, 2 ignored (already finished), -1 fenced (a newer job holds the lock,
-- or this job was taken over). A missing record (the store came back empty) is written
-- back whole so the result is not lost, unless a newer job holds the lock by then.
local st = redis.call('HMGET', KEYS[1], 'status', 'superseded_by', 'percent', 'started_ms')
local lock = redis.call('GET', KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[6])
if not st[1] then
  if lock and lock ~= ARGV[1] then return -1 end
  redis.call('HSET', KEYS[1], 'tenant', ARGV[7], 'kind', ARGV[8],
    'params', ARGV[9], 'created_ms', ARGV[10], 'restored', 1)
  redis.call('LPUSH', KEYS[3], ARGV[1])
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[11]) - 1)
  redis.call('EXPIRE', KEYS[3], ttl)
else
  if st[2] then return -1 end
  if st[1] ~= 'queued' and st[1] ~= 'running' then return 2 end
end
local percent = math.max(tonumber(st[3]) or 0, tonumber(ARGV[12]))
if ARGV[2] == 'done' then percent = 100 end
-- One HSET: the outcome (result for done, error class for failed, nothing for cancelled),
-- and started_ms for a job that ended before its first progress write.
local fields = {'status', ARGV[2], 'percent', percent, 'step', ARGV[5], 'updated_ms', now,
  'heartbeat_ms', now, 'finished_ms', now, 'started_ms', st[4] or now}
if ARGV[2] == 'done' then
  table.insert(fields, 'result'); table.insert(fields, ARGV[3])
elseif ARGV[2] == 'failed' then
  table.insert(fields, 'error'); table.insert(fields, ARGV[4])
  if ARGV[3] ~= '' then table.insert(fields, 'result'); table.insert(fields, ARGV[3]) end
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('EXPIRE', KEYS[1], ttl)
if lock == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
