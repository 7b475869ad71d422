-- finish: end a run's job and release its lock if the lock still holds it, in one step; and
-- when the worker that ran it is free for another, claim the next job for it in the same step
-- (one script a job instead of two, and no wake-up), from the queue of the group the caller's
-- round robin serves next: this call's own group, or on a single Redis (where every key is on
-- the one server) another group's, named by its queue. The library holds this body as
-- `finish_one()` (jobs/redis/scripts.rs): the `finish` function runs it for its call,
-- `finishes` (finishes.lua) for each request of a call of several that claim nothing, with
-- `A` the request's own arguments and the call's one time (CALL_NOW).
-- A: the run's job (see `run_args` in the prelude; its fields may be an empty list), then the
--    outcome as a named list:
--    status (failed|cancelled; none for done), step (none for done: it is `finished`), and result
--    (JSON; a failed job may carry its partial report) and error (the class) when it has
--    them; then the job's tenant, kind, created_ms and pipeline ('' for none), which its run
--    holds (written at its create and never changed: sent, they are not read from the record,
--    ~1,300 Redis instructions less each); then, to claim the worker's next job, the queue to
--    claim from ('' for this call's group's), the worker and the kinds it runs (a call that
--    claims nothing sends none of them: two arguments less, ~2,300 Redis instructions)
-- KEYS (after the group's keys): the job's record and what its end touches (`reach_end` in
-- order.lua), and for a record to write back what that touches (`reach_write_back`); to claim
-- the worker's next job, the records of the jobs at the head of the queue it claims from (as
-- claim.lua), and for another group's queue, that queue and its group's lease index.
-- Returns 'missing' when the record is missing and the call left out the job's fields
-- (nothing written); else 'applied' when it claimed nothing and released nothing (the usual
-- answer: a word, not a table, which Redis turns into its reply for ~7,000 instructions
-- less), or {'applied', next, head, released}: next is false or a claim as claim.lua answers
-- one; head is the head of the queue claimed from as claim.lua answers it, or false when the
-- call claims nothing or found that queue empty; released is 1 when the end put a job of
-- this call's group in its ready queue (the next of its tenant's lane), else 0 (a lone word
-- reads as {word}: `finish_answer` in jobs/redis/writes.rs). Or 'ended' (already ended),
-- 'fenced' (another run or job holds it), or {'stale', keys…} (the call left out keys the
-- step touches: nothing written). A missing record (the store came back empty) is written
-- back whole so the result is not lost, unless something newer says otherwise
-- (`may_write_back`: a newer job, or the tenant deleted since).
local id, claim, run_percent, i = run_head()
local outcome, j = named_args(i)
-- A done job's status and its step, `finished`, are not sent (four arguments less a finish,
-- each ~1,150 Redis instructions): an outcome without a status is `done`.
if not outcome.status then outcome.status = 'done' end
if not outcome.step then outcome.step = DEFAULT_STEPS.finished end
local tenant, kind, created_ms, pipeline = A[j], A[j + 1], A[j + 2], A[j + 3]
local from, worker = A[j + 4] or '', A[j + 5] or ''
-- Another group's queue (and its lease index) is checked before anything is written.
if from ~= '' then
  if CLUSTER then error(redis.error_reply('ERR a finish claims from its own group on a cluster')) end
  key(from)
  key(string.sub(from, 1, -7) .. ':leases')
end
local hkey = k_job(id)
local code, st = run_state(hkey, claim,
  outcome.status == 'done' and FINISH_FIELDS.done or FINISH_FIELDS.any)
if code ~= 'missing' and code ~= 'held' then return code end
st.tenant, st.kind, st.created_ms = tenant, kind, created_ms
if pipeline ~= '' then st.pipeline = pipeline end
-- A call without the job's fields (the usual one) answers a missing record with `missing`,
-- having written nothing: its caller calls again with them, to write the record back.
if code == 'missing' and A[4] == '0' then return 'missing' end
local now = CALL_NOW or now_ms()
local fields = outcome
local copy = code == 'missing' and run_job() or nil
local missed = reach(reach_finish, copy, id, st, now)
if missed then return answer_stale(missed) end
if code == 'missing' then
  local job = copy
  local tenant, kind = job.tenant, job.kind
  if not may_write_back(id, tenant, kind, job.created_ms) then return {'fenced'} end
  for name, value in pairs(job) do fields[name] = value end
  fields.claim, fields.restored = claim, 1
  st = job
  note(id, st, fields, 'restored', 'running', run_percent, outcome.step, now)
  list_push(tenant, id)
end
if outcome.status == 'done' then
  fields.percent = 100
else
  fields.percent = math.max(tonumber(st.percent) or 0, run_percent)
end
fields.heartbeat_ms, fields.finished_ms = now, now
-- (A record written back is started now; a held one without `started_ms` was claimed at its
-- create, and reads as started then: FIRST_CLAIM.)
if code == 'missing' and not st.started_ms then fields.started_ms = now end
end_job(id, st, fields, now)
if code == 'missing' then redis.call('EXPIRE', hkey, TTL_S) end
if worker == '' then return RELEASED and {'applied', false, false, 1} or 'applied' end
local runs = runs_of(j + 6)
if from ~= '' then enter_group(from) end
local next, empty = claim_one(worker, runs, now)
local released = RELEASED and 1 or 0
if empty then return released == 1 and {'applied', false, false, 1} or 'applied' end
return {'applied', next or false, queue_head(), released}
