-- tick: record a run's progress; percent never goes down.
-- A: id, claim, percent (0-100), step
-- Returns 1 applied, 0 missing, 2 ended, -1 fenced (this run no longer holds the job).
local hkey = k_job(A[1])
local code, st = run_state(hkey, A[2])
if code ~= 1 then return code end
local percent = math.max(tonumber(st[4]) or 0, tonumber(A[3]))
local now = now_ms()
redis.call('HSET', hkey, 'percent', percent, 'step', A[4], 'updated_ms', now)
note(A[1], st[6], st[7], 'progress', st[5] and 'cancelling' or 'running', percent, A[4], now)
return 1
