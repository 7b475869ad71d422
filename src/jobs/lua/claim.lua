-- claim: take up to n jobs from the head of the ready queue for a worker, as leased runs (see
-- `claim_one` in the prelude), in one step: a dispatcher with several free workers fills them
-- with one call.
-- A: worker (host/pid), n, then the kinds it runs
-- Returns a list (empty when nothing is left to claim) of {id, then the claimed job's record
-- as name, value, …}; when fewer than n were claimed though the queue still holds jobs (of
-- kinds this worker does not run), an empty list last: the caller looks at this queue again
-- later, since no wake-up tells it of a queue that never emptied.
local runs = {}
local n = tonumber(A[2])
for i = 3, #A do runs[A[i]] = true end
local out = claim_up_to(n, A[1], runs, now_ms())
if #out < n and redis.call('LLEN', K_QUEUE) > 0 then out[#out + 1] = {} end
return out
