-- creates: several independent creates in one call (the requests a process's creates queued
-- while its last create call was in flight: jobs/redis/commit.rs), each answered exactly as
-- a call of create.lua of its own would answer it, in order: each request's step sees what
-- the steps before it wrote (two creates of one tenant answer as two calls in turn would), and
-- a refusal (`held`, `rate_limited`, `queue_full`, `replayed`, `stale`, …) changes nothing but
-- that request's answer. One TIME is read for the call (CALL_NOW), each group's queue length
-- once (LONE.queued, kept as the call's requests push to it), and one FCALL's entry cost is
-- paid for all of them.
-- KEYS: every key a request names (as its own create call would name them: its group's queue
-- and migrating key, then what create.lua's header lists), each once; the call's first two
-- are the first request's group's. A request's step may touch any of them (all are of the
-- call's slot on a cluster, whose calls hold one group's requests), and no other.
-- A: n, then for each request its group's queue, how many arguments it has, and those
--    arguments as create.lua takes them (the settings last, once for the call).
-- Returns one answer a request, create.lua's, in order; a request whose step raised an error
-- (a key of another type than its command's, a key the call did not name) answers {'error',
-- message} (its own call would have failed with it; an error reply inside the answer would
-- fail the whole call in the client), and the others go on. Every read that could raise such
-- an error about a request's keys (its lock, listing, lane, idempotency key) comes in its
-- reach, before its first write, as in a call of its own.
local answers, at, keys = {}, 2, KEYS_
CALL_NOW, LONE.queued = now_ms(), {}
for r = 1, A[1] + 0 do
  local queue, m = A[at], A[at + 1] + 0
  enter_step(keys, key(queue))
  local ok, answer = pcall(create_one, at + 2, at + 1 + m)
  if not ok then
    -- What the failed step wrote before its error is not known here: queues are read again.
    LONE.queued = {}
    answer = tostring(answer)
    if not string.find(answer, '^%u+ ') then answer = 'ERR ' .. answer end
    answer = {'error', answer}
  end
  answers[r] = answer
  at = at + 2 + m
end
return answers
