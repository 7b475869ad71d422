-- fenced_hset: writes fields of one catalogue hash only while its writer's fence holds
-- (`fence_at` of jobs/lua/fence.lua, loaded in front of this script with the job record's
-- schema): a run that lost its job, or an import into a tenant deleted since it began,
-- writes nothing.
-- KEYS[1] the hash, KEYS[2] the tenant's tombstone, KEYS[3] the run's job record (none for an
-- import). ARGV[1] since, ARGV[2] the run's claim ('' for an import), ARGV[3] seconds the hash
-- lives (0: no TTL), then field, value, …
-- Answers 'written', or why not: 'fenced', 'missing' (the run's record is gone; see fence.lua).
local state = fence_at(2)
if state ~= 'held' then return state end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return 'written'
