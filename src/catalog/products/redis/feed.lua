-- feed: the change feed's one operation, loaded in front of the scripts that note changes
-- (`fenced_write.lua`, `note.lua`). See `products::feed` for what it promises.
-- note_changes(feed, at, bound, from, step): notes ARGV[from], ARGV[from + step], … (product
-- keys) as written under the next position (`seq` of the hash `at`); past `bound` keys the
-- feed overflows: its keys go and `overflow` holds the position of the last write not noted
-- until a pair that read the feed after it saves (`swap_table.lua`).
local function note_changes(feed, at, bound, from, step)
  if from > #ARGV then return end
  local seq = redis.call('HINCRBY', at, 'seq', 1)
  if redis.call('HEXISTS', at, 'overflow') == 1 then
    redis.call('HSET', at, 'overflow', seq)
    return
  end
  local args = {}
  for i = from, #ARGV, step do
    args[#args + 1] = seq
    args[#args + 1] = ARGV[i]
    if #args >= 1000 then
      redis.call('ZADD', feed, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('ZADD', feed, unpack(args)) end
  if redis.call('ZCARD', feed) > bound then
    redis.call('DEL', feed)
    redis.call('HSET', at, 'overflow', seq)
  end
end
