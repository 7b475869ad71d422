-- feed: the change feed's one operation and the ZADD it shares with the listing's index,
-- loaded in front of the scripts that note changes (`fenced_write.lua`, `note.lua`). See
-- `products::feed` for what it promises.
-- note_changes(feed, at, bound, from, step): notes ARGV[from], ARGV[from + step], … (product
-- keys) as written under the next position (`seq` of the hash `at`); past `bound` keys the
-- feed overflows: its keys go and `overflow` holds the position of the last write not noted
-- until a pair that read the feed after it saves (`swap_table.lua`).
-- zadd_argv(key, score, from, step): adds ARGV[from], ARGV[from + step], … to the sorted set
-- `key` at `score`, 500 a ZADD (the products hash's writes join the listing's index so).
local function zadd_argv(key, score, from, step)
  local args = {}
  for i = from, #ARGV, step do
    args[#args + 1] = score
    args[#args + 1] = ARGV[i]
    if #args >= 1000 then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('ZADD', key, unpack(args)) end
end

local function note_changes(feed, at, bound, from, step)
  if from > #ARGV then return end
  local seq = redis.call('HINCRBY', at, 'seq', 1)
  if redis.call('HEXISTS', at, 'overflow') == 1 then
    redis.call('HSET', at, 'overflow', seq)
    return
  end
  zadd_argv(feed, seq, from, step)
  if redis.call('ZCARD', feed) > bound then
    redis.call('DEL', feed)
    redis.call('HSET', at, 'overflow', seq)
  end
end
