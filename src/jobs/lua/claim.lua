-- claim: take up to n jobs from the head of the ready queue for a worker, as leased runs (see
-- `claim_one` in the prelude), in one step: a dispatcher with several free workers fills them
-- with one call.
-- A: worker (host/pid), n, then the kinds it runs
-- KEYS (after the group's keys): the group's lease index and the records of the jobs at the
-- queue's head it may claim (as the last claim's answer named them: a claim stops at the
-- first entry whose record its call did not name).
-- Returns a list of {id, then the claimed job's record as name, value, …} (none when nothing
-- was claimed); when fewer than n were claimed though the queue still holds jobs (of kinds
-- this worker does not run, or not named), an empty list; and last the queue's head now,
-- {'head', id…} (`queue_head`), for the next call to name. The caller looks at this queue
-- again later when it holds jobs, since no wake-up tells it of a queue that never emptied.
local runs = runs_of(3)
local n = tonumber(A[2])
local out = claim_up_to(n, A[1], runs, now_ms())
if #out < n and redis.call('LLEN', K_QUEUE) > 0 then out[#out + 1] = {} end
out[#out + 1] = queue_head()
return out
