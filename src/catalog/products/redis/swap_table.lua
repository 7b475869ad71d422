-- swap_table: puts a staged neighbour table — whole, or the rows that changed — and a staged
-- pairing state in place in one step, only while the run that staged them still holds its
-- job and its tenant was not deleted since (`fence_at` of jobs/lua/fence.lua, loaded in
-- front of this script with the job record's schema). A refused swap deletes what was
-- staged and leaves the live table and state whole.
-- KEYS[1] staged rows (a hash; may not exist), KEYS[2] live table, KEYS[3] staged keys whose
-- rows go (a set; may not exist), KEYS[4] staged pairing state (may not exist: the new table
-- has none), KEYS[5] live pairing state, KEYS[6] the set naming the tenant's staging keys
-- (the staged ones leave it here), KEYS[7] the change feed, KEYS[8] its position and
-- overflow; then, when the fence is checked here, KEYS[9] the tenant's tombstone and
-- KEYS[10] the run's job record.
-- ARGV[1] since, ARGV[2] the run's claim (both '' when the caller checks the fence itself),
-- ARGV[3] `whole` (the staged rows are the table) or `rows` (they replace their own rows),
-- ARGV[4] the feed's position the new pairing state read it at ('' for a table without a
-- state): the feed forgets what it noted up to there, and holds every change since.
-- Answers 'swapped', or why not: 'fenced', 'missing' (the run's record is gone).
local function unname()
  redis.call('SREM', KEYS[6], KEYS[1], KEYS[3], KEYS[4])
end
-- Puts the staged key in place of the live one (RENAME is atomic; the live key has no TTL,
-- so the staged one's goes too), or drops the live one when nothing was staged.
local function promote(staged, live)
  if redis.call('EXISTS', staged) == 1 then
    redis.call('RENAME', staged, live)
    redis.call('PERSIST', live)
  else
    redis.call('DEL', live)
  end
end
if #KEYS > 8 then
  local state = fence_at(9)
  if state ~= 'held' then
    redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
    unname()
    return state
  end
end
if ARGV[3] == 'whole' then
  promote(KEYS[1], KEYS[2])
else
  -- In slices, to stay within Lua's stack for a patch of many rows.
  local rows = redis.call('HGETALL', KEYS[1])
  for i = 1, #rows, 1000 do
    redis.call('HSET', KEYS[2], unpack(rows, i, math.min(i + 999, #rows)))
  end
  local gone = redis.call('SMEMBERS', KEYS[3])
  for i = 1, #gone, 500 do
    redis.call('HDEL', KEYS[2], unpack(gone, i, math.min(i + 499, #gone)))
  end
  redis.call('DEL', KEYS[1], KEYS[3])
end
promote(KEYS[4], KEYS[5])
if ARGV[4] ~= '' then
  local upto = tonumber(ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', upto)
  local overflow = tonumber(redis.call('HGET', KEYS[8], 'overflow'))
  if overflow and overflow <= upto then redis.call('HDEL', KEYS[8], 'overflow') end
  redis.call('HSET', KEYS[8], 'since', upto)
end
unname()
return 'swapped'
