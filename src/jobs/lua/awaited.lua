-- awaited: a request waits for this job's end (`wait=true`) on some replica: its end is
-- published to every process from now on (`end:<id>` on the store's channel). A job nobody
-- waits for ends without that message: the process that ran it tells its own waiters.
-- KEYS (after the group's keys): the job's record.
-- A: id
-- Returns 'applied', or 'missing' (no such job: nothing written).
local hkey = k_job(A[1])
if redis.call('EXISTS', hkey) == 0 then return 'missing' end
write_job(hkey, {awaited = 1})
return 'applied'
