-- create: make a job and take its tenant+kind lock in one step, or name the active holder.
-- KEYS[1] job hash of the new job   KEYS[2] lock   KEYS[3] tenant list
-- ARGV[1] job id  ARGV[2] tenant  ARGV[3] kind  ARGV[4] params (JSON)  ARGV[5] step
-- ARGV[6] ttl (s)  ARGV[7] stale threshold (ms)  ARGV[8] list cap
-- ARGV[9] job hash key prefix ("job:"), to read the holder's hash: the holder's id is only
--         known inside this step, so its key cannot be passed in KEYS (single-instance Redis).
-- Returns {1, now_ms} when created; {0, holder_id} when an active holder keeps the lock.
-- A holder that is finished, missing or stale is taken over; a stale one is fenced off
-- (superseded_by) so that a process presumed dead cannot write to it again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder = redis.call('GET', KEYS[2])
if holder then
  local hkey = ARGV[9] .. holder
  local st = redis.call('HMGET', hkey, 'status', 'heartbeat_ms', 'created_ms')
  if st[1] == 'queued' or st[1] == 'running' then
    if now - tonumber(st[2] or st[3]) < tonumber(ARGV[7]) then
      return {0, holder}
    end
    redis.call('HSET', hkey, 'superseded_by', ARGV[1])
  end
end
local ttl = tonumber(ARGV[6])
-- Fields left out here read as their defaults: percent 0, updated_ms and heartbeat_ms equal
-- to created_ms (every later write sets them). Fewer fields keep this, the hottest script, cheap.
redis.call('HSET', KEYS[1], 'tenant', ARGV[2], 'kind', ARGV[3], 'params', ARGV[4],
  'status', 'queued', 'step', ARGV[5], 'created_ms', now)
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], ARGV[1], 'EX', ttl)
if redis.call('LPUSH', KEYS[3], ARGV[1]) > tonumber(ARGV[8]) then
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[8]) - 1)
end
redis.call('EXPIRE', KEYS[3], ttl)
return {1, now}
