-- finishes: several independent finishes in one call (the finishes a process's runs sent
-- while its last finish calls were in flight: jobs/redis/commit.rs), each answered exactly as
-- a call of finish.lua of its own would answer it, in order: each request's step sees what
-- the steps before it wrote, and an answer that writes nothing (`fenced`, `ended`, `missing`,
-- `stale`) is that request's alone. One TIME is read for the call (CALL_NOW), and one FCALL's
-- entry cost is paid for all of them.
-- KEYS: every key a request names (as its own finish call would name them: its group's queue
-- and migrating key, then what finish.lua's header lists), each once; the call's first two
-- are the first request's group's. A request's step may touch any of them (all are of the
-- call's slot on a cluster, whose calls hold one group's requests), and no other.
-- A: n, then for each request its group's queue, how many arguments it has, and those
--    arguments as finish.lua takes them (the settings last, once for the call).
-- Returns one answer a request, finish.lua's, in order; a request whose step raised an error
-- answers {'error', message} (its own call would have failed with it), and the others go on.
-- When every request answered the usual word, `applied`, the call answers that word alone
-- (jobs/redis/commit.rs reads it as each request's): Redis turns a table into its reply for
-- ~7,000 instructions more, which at 2 requests a call was the whole of what the call saved.
local answers, at, keys, all, usual = {}, 2, KEYS_, A, true
CALL_NOW = now_ms()
for r = 1, all[1] + 0 do
  local queue, m = all[at], all[at + 1] + 0
  enter_step(keys, key(queue))
  -- The request's arguments are its step's A, as its own call's would be.
  A = {unpack(all, at + 2, at + 1 + m)}
  local ok, answer = pcall(finish_one)
  if not ok then
    if type(answer) == 'table' and answer.err then answer = answer.err end
    answer = tostring(answer)
    if not string.find(answer, '^%u+ ') then answer = 'ERR ' .. answer end
    answer = {'error', answer}
  end
  answers[r], usual = answer, usual and answer == 'applied'
  at = at + 2 + m
end
if usual then return 'applied' end
return answers
