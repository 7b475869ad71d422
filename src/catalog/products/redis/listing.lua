-- listing: a page of the tenant's products in key order (`cursor.rs`), read from the
-- listing's index: a sorted set of the product keys, all at score 0, so ZRANGEBYLEX walks
-- them in byte order (the embedded store's key order) from the last key a page served.
-- A products write adds its keys to the index in the same step (`fenced_write.lua`), so the
-- index holds every key of the hash, and more only after a removal (`remove`, which leaves
-- it): whenever it does not count the hash's keys, it is made again from the hash here (the
-- first listing of a catalogue written before the index was, and the first after a
-- removal; on the 2-core VM 0.15-0.2 s of Redis for 100,000 products). So a page never lists a
-- key twice and a cursor never skips a key that was there throughout.
-- KEYS[1] the products hash, KEYS[2] the index.
-- ARGV[1] the last key served ('' for the first page), ARGV[2] how many keys at most.
-- Returns the keys, in key order, and their stored values.
local n = redis.call('HLEN', KEYS[1])
if n == 0 then
  redis.call('DEL', KEYS[2])
  return {{}, {}}
end
if redis.call('ZCARD', KEYS[2]) ~= n then
  redis.call('DEL', KEYS[2])
  local keys = redis.call('HKEYS', KEYS[1])
  local args = {}
  for i = 1, #keys do
    args[#args + 1] = 0
    args[#args + 1] = keys[i]
    if #args >= 1000 then
      redis.call('ZADD', KEYS[2], unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('ZADD', KEYS[2], unpack(args)) end
end
local from = '-'
if ARGV[1] ~= '' then from = '(' .. ARGV[1] end
local keys = redis.call('ZRANGEBYLEX', KEYS[2], from, '+', 'LIMIT', 0, tonumber(ARGV[2]))
if #keys == 0 then return {{}, {}} end
return {keys, redis.call('HMGET', KEYS[1], unpack(keys))}
