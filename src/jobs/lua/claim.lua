-- claim: take the job at the head of the ready queue for a worker, as a leased run.
-- A: worker (host/pid), then the kinds it runs
-- Returns {} when the queue is empty, else {id, claim, attempt, tenant, kind, params,
-- created_ms, created_by, request_id, retry_of} ('' for a field the job lacks).
-- `claim` is the run's fencing token (raised by every claim); `attempt` counts runs against
-- MAX_ATTEMPTS, except a run given back at shutdown (free_retry). Entries whose job ended,
-- vanished or was taken over while it waited are dropped on the way. A job of a kind this
-- worker does not run (replicas of two versions during a deploy, or a rollback) goes to the
-- tail for a worker that does, and this one looks further; once it meets such a job a
-- second time it has seen the whole queue and claims nothing.
local now = now_ms()
local runs = {}
for i = 2, #A do runs[A[i]] = true end
local first_passed = nil
while true do
  local id = redis.call('LPOP', K_QUEUE)
  if not id then return {} end
  if id == first_passed then
    redis.call('LPUSH', K_QUEUE, id)
    return {}
  end
  local hkey = k_job(id)
  local st = redis.call('HMGET', hkey, 'status', 'superseded_by', 'attempt', 'free_retry',
    'tenant', 'kind', 'params', 'created_ms', 'claim', 'started_ms', 'percent', 'created_by',
    'request_id', 'retry_of')
  if st[1] == 'queued' and not st[2] and not runs[st[6]] then
    redis.call('RPUSH', K_QUEUE, id)
    first_passed = first_passed or id
  elseif st[1] == 'queued' and not st[2] then
    local attempt = tonumber(st[3] or '0')
    if st[4] then redis.call('HDEL', hkey, 'free_retry') else attempt = attempt + 1 end
    local claim = tonumber(st[9] or '0') + 1
    -- One HSET; no EXPIRE: the job's TTL was set at create and is renewed by every renewal
    -- and by the finish.
    redis.call('HSET', hkey, 'status', 'running', 'claim', claim, 'attempt', attempt,
      'worker', A[1], 'step', 'starting', 'updated_ms', now, 'heartbeat_ms', now,
      'started_ms', st[10] or now)
    redis.call('ZADD', K_LEASES, now + STALE, id)
    note(id, st[5], st[6], 'started', 'running', st[11], 'starting', now,
      {'attempt', attempt, 'worker', A[1]})
    return {id, claim, attempt, st[5], st[6], st[7], st[8], st[12] or '', st[13] or '',
      st[14] or ''}
  end
end
