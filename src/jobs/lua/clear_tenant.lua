-- clear_tenant: remove a tenant's jobs and the locks they hold, in one step.
-- KEYS[1] tenant list, then for each job i: KEYS[2i] job hash, KEYS[2i+1] that job's lock
-- ARGV[i] job id i
-- Returns how many job hashes were deleted. A lock is deleted only if it holds job i,
-- so a job created since the caller read the list keeps its lock.
local n = 0
for i = 1, #ARGV do
  local hkey, lkey = KEYS[2 * i], KEYS[2 * i + 1]
  if redis.call('GET', lkey) == ARGV[i] then redis.call('DEL', lkey) end
  n = n + redis.call('DEL', hkey)
  redis.call('LREM', KEYS[1], 0, ARGV[i])
end
return n
