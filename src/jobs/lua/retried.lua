-- retried: an ended job records who retried it and as which job (a later retry of it
-- overwrites both). The one write an ended job sees after its end.
-- A: id, by (the caller's name), the new job's id
-- Returns 'applied', or 'missing' (the record is gone: nothing written, so an expired
-- record is not made again).
local hkey = k_job(A[1])
if redis.call('EXISTS', hkey) == 0 then return 'missing' end
write_job(hkey, {retried_by = A[2], retried_as = A[3]})
return 'applied'
