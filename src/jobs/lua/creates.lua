-- creates: several independent creates in one call (the requests a process's creates queued
-- while its last create call was in flight: jobs/redis/creates.rs), each answered exactly as
-- a call of create.lua of its own would answer it, in order: each request's step sees what
-- the steps before it wrote (two creates of one tenant answer as two calls in turn would), and
-- a refusal (`held`, `rate_limited`, `queue_full`, `replayed`, `stale`, …) changes nothing but
-- that request's answer. One TIME is read for the call (CALL_NOW), and one FCALL's entry cost
-- is paid for all of them.
-- KEYS: each request's keys in turn, as its own create call would name them (its group's
-- queue and migrating key first, then what create.lua's header lists); the call's first two
-- are the first request's. Keys may repeat: each request's step checks only its own (`key`).
-- A: n, then for each request the place of its first key in KEYS, how many keys it names, how
--    many arguments it has, and those arguments as create.lua takes them (settings last, once).
-- Returns one answer a request, create.lua's, in order; a request whose step raised an error
-- (a key of another type than its command's, a key it did not name) answers {'error',
-- message} (its own call would have failed with it; an error reply inside the answer would
-- fail the whole call in the client), and the others go on. Every read that could raise
-- such an error about a request's keys (its lock, listing, lane, idempotency key) comes in its
-- reach, before its first write, as in a call of its own.
local all, answers, i = A, {}, 2
local keys = KEYS_
CALL_NOW = now_ms()
for r = 1, all[1] + 0 do
  local from, named, m = all[i] + 0, all[i + 1] + 0, all[i + 2] + 0
  enter_step({unpack(keys, from, from + named - 1)})
  A = {unpack(all, i + 3, i + 2 + m)}
  i = i + 3 + m
  local ok, answer = pcall(create_one)
  if not ok then
    answer = tostring(answer)
    if not string.find(answer, '^%u+ ') then answer = 'ERR ' .. answer end
    answer = {'error', answer}
  end
  answers[r] = answer
end
return answers
