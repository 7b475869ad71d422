-- claim: take up to n jobs from the head of the ready queue for a worker, as leased runs (see
-- `claim_one` in the prelude), in one step: a dispatcher with several free workers fills them
-- with one call.
-- A: worker (host/pid), n, then the kinds it runs
-- Returns a list (empty when nothing is left to claim) of {id, then the claimed job's record
-- as name, value, …}.
local runs = {}
for i = 3, #A do runs[A[i]] = true end
return claim_up_to(tonumber(A[2]), A[1], runs, now_ms())
