-- tick: record a run's progress; percent never goes down. Every tick is the job's latest
-- progress (`@tick`, shown last by a timeline read) and goes to the tenant's watchers; it is
-- also sampled into the timeline (the `@p` ring) when SAMPLE_MS have passed since the last
-- sample and its step differs from that one's, or when twelve times that passed whatever the
-- step (the rule is explained at PROGRESS_KEPT in jobs/timeline.rs). All in one HSET.
-- KEYS (after the group's keys): the job's record.
-- A: id, claim, percent (0-100), step
-- Returns 'applied', or why not: 'missing', 'ended', 'fenced' (this run no longer holds it).
local id, step = A[1], A[4]
local hkey = k_job(id)
local code, job = run_state(hkey, A[2], TICK_FIELDS)
if code ~= 'held' then return code end
local percent = math.max(tonumber(job.percent) or 0, tonumber(A[3]))
local now = now_ms()
local fields = {percent = percent, step = step, updated_ms = now}
local value = note(id, job, fields, 'progress',
  job.cancel_requested_ms and 'cancelling' or 'running', percent, step, now)
local n = tonumber(job.sampled or '0')
local since = now - tonumber(job.sampled_ms or '0')
local sample = since >= SAMPLE_MS * 12
if not sample and since >= SAMPLE_MS then
  local last = n > 0 and redis.call('HGET', hkey, '@p' .. ((n - 1) % PROGRESS_KEPT)) or nil
  sample = not last or string.match(last, '^[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(.*)$') ~= step
end
if sample then
  fields['@p' .. (n % PROGRESS_KEPT)] = value
  fields.sampled, fields.sampled_ms = n + 1, now
end
write_job(hkey, fields)
return 'applied'
