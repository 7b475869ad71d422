-- queued: how many jobs of each kind wait in the shared ready queue (read only, for the
-- queued gauge at a metrics scrape; never on a job's path).
-- A: how many queue entries to look at, from the head
-- Returns a flat list: kind, count, kind, count, …
local counts = {}
for _, id in ipairs(redis.call('LRANGE', K_QUEUE, 0, tonumber(A[1]) - 1)) do
  local kind = read_job(k_job(id), {'kind'}).kind
  if kind then counts[kind] = (counts[kind] or 0) + 1 end
end
local out = {}
for kind, n in pairs(counts) do
  out[#out + 1] = kind
  out[#out + 1] = n
end
return out
