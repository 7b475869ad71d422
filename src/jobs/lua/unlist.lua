-- unlist: drops from the group's index (`everyone`, jobs/browse.rs) the entries a listing's
-- walk found without a job: each only while its record does not exist, checked here, so a
-- job that is there is never unlisted. Touches no other key.
-- KEYS (after the group's keys): the group's index, then each entry's job record.
-- A: the entries (`<ms>.<id>`), each of a job this group's id names.
-- Returns how many entries left the index.
local index = k_group(K_EVERYONE)
local removed = 0
for i = 1, #A do
  local id = string.match(A[i], '^%d+%.(.+)$')
  if id and redis.call('EXISTS', k_job(id)) == 0 then
    removed = removed + redis.call('ZREM', index, A[i])
  end
end
return removed
