-- fenced_write: one write to one catalogue key only while its writer's fence holds
-- (`fence_at` of jobs/lua/fence.lua, loaded in front of this script with the job record's
-- schema, and `note_changes` of feed.lua): a run that lost its job, or an import into a
-- tenant deleted since it began, writes nothing — neither to the catalogue nor to what pair
-- stages aside. A write to the catalogue notes its fields in the change feed in the same step.
-- KEYS[1] the key; then for a key staged aside, KEYS[2] the set naming the tenant's staging
-- keys (`CatalogKeys::staged`, which a delete reads), or for a key of the catalogue, KEYS[2]
-- the change feed and KEYS[3] its position, and for the products hash KEYS[4] the listing's
-- index (`listing.lua`), which the written fields join in the same step; then, for a named
-- batch's write, the key of its record; then the fence's keys: the tenant's tombstone, and
-- the run's job record (none for an import).
-- ARGV[1] since, ARGV[2] the run's claim ('' for an import), ARGV[3] seconds a staged key
-- lives (0: a key of the catalogue, kept), ARGV[4] the change feed's bound (a key of the
-- catalogue), ARGV[5] '1' when KEYS[4] is the listing's index, ARGV[6] the write: HSET
-- (field, value, …), SADD (member, …) or APPEND (one value), ARGV[7] the batch's record
-- ('' for none: then no key of it), ARGV[8] the seconds the record lives, then the write's
-- arguments.
-- Answers 'written', or why not: 'fenced', 'missing' (the run's record is gone; see fence.lua).
local write = ARGV[6]
local listed = ARGV[5] == '1'
if write ~= 'HSET' and write ~= 'SADD' and write ~= 'APPEND' then
  return redis.error_reply('fenced_write: not a catalogue write: ' .. tostring(write))
end
local ttl = tonumber(ARGV[3])
if ttl == 0 and write ~= 'HSET' then
  return redis.error_reply('fenced_write: a catalogue key is written with HSET')
end
local at = 4
if ttl > 0 then at = 3 end
if listed then at = 5 end
local record = ARGV[7]
if record ~= '' then at = at + 1 end
local state = fence_at(at)
if state ~= 'held' then return state end
redis.call(write, KEYS[1], unpack(ARGV, 9))
-- Recorded in the step that writes the rows: no sending again reads the rows without it.
if record ~= '' then redis.call('SET', KEYS[at - 1], record, 'EX', ARGV[8]) end
if ttl > 0 then
  -- Named in the same step as it is written: no staging key exists that a delete misses.
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('SADD', KEYS[2], KEYS[1])
  redis.call('EXPIRE', KEYS[2], ttl)
else
  note_changes(KEYS[2], KEYS[3], tonumber(ARGV[4]), 9, 2)
  if listed then zadd_argv(KEYS[4], 0, 9, 2) end
end
return 'written'
