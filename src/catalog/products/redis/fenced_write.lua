-- fenced_write: one write to one catalogue key only while its writer's fence holds
-- (`fence_at` of jobs/lua/fence.lua, loaded in front of this script with the job record's
-- schema): a run that lost its job, or an import into a tenant deleted since it began,
-- writes nothing — neither to the catalogue nor to what pair stages aside.
-- KEYS[1] the key, KEYS[2] the tenant's tombstone, KEYS[3] the run's job record (none for an
-- import). ARGV[1] since, ARGV[2] the run's claim ('' for an import), ARGV[3] seconds the key
-- lives (0: no TTL), ARGV[4] the write: HSET (field, value, …), SADD (member, …) or APPEND
-- (one value), then its arguments.
-- Answers 'written', or why not: 'fenced', 'missing' (the run's record is gone; see fence.lua).
local write = ARGV[4]
if write ~= 'HSET' and write ~= 'SADD' and write ~= 'APPEND' then
  return redis.error_reply('fenced_write: not a catalogue write: ' .. tostring(write))
end
local state = fence_at(2)
if state ~= 'held' then return state end
redis.call(write, KEYS[1], unpack(ARGV, 5))
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return 'written'
