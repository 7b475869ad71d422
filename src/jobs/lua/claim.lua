-- claim: take the job at the head of the ready queue for a worker, as a leased run.
-- A: worker (host/pid), then the kinds it runs
-- Returns {} when the queue is empty, else {id, then the job as a named list: claim,
-- attempt, tenant, kind, params, created_ms and the audit fields it has}.
-- `claim` is the run's fencing token (raised by every claim); `attempt` counts runs against
-- MAX_ATTEMPTS, except a run given back at shutdown (free_retry). Entries whose job ended,
-- vanished or was taken over while it waited are dropped on the way. A job of a kind this
-- worker does not run (replicas of two versions during a deploy, or a rollback) goes to the
-- tail for a worker that does, and this one looks further; once it meets such a job a
-- second time it has seen the whole queue and claims nothing.
local CLAIMED = {'claim', 'attempt', 'tenant', 'kind', 'params', 'created_ms', 'created_by',
  'request_id', 'retry_of'}
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
  local job = read_job(hkey, {'status', 'superseded_by', 'attempt', 'free_retry', 'tenant',
    'kind', 'params', 'created_ms', 'claim', 'started_ms', 'percent', 'created_by',
    'request_id', 'retry_of'})
  if job.status == 'queued' and not job.superseded_by and not runs[job.kind] then
    redis.call('RPUSH', K_QUEUE, id)
    first_passed = first_passed or id
  elseif job.status == 'queued' and not job.superseded_by then
    local attempt = tonumber(job.attempt or '0')
    if job.free_retry then redis.call('HDEL', hkey, 'free_retry') else attempt = attempt + 1 end
    job.claim = tonumber(job.claim or '0') + 1
    job.attempt = attempt
    -- One HSET; no EXPIRE: the job's TTL was set at create and is renewed by every renewal
    -- and by the finish.
    write_job(hkey, {status = 'running', claim = job.claim, attempt = attempt, worker = A[1],
      step = 'starting', updated_ms = now, heartbeat_ms = now,
      started_ms = job.started_ms or now})
    redis.call('ZADD', K_LEASES, now + STALE, id)
    note(id, job.tenant, job.kind, 'started', 'running', job.percent, 'starting', now,
      {'attempt', attempt, 'worker', A[1]})
    local answer = flat_fields(job, CLAIMED)
    table.insert(answer, 1, id)
    return answer
  end
end
