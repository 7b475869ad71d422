-- note: notes products as changed in the change feed (`note_changes` of feed.lua, loaded in
-- front of this script), for a write made without a script of its own — a removal, or a
-- write under the job store's own fence check — inside that write's transaction, so the
-- write is never seen without its note.
-- KEYS[1] the feed (a sorted set), KEYS[2] its position and overflow (a hash).
-- ARGV[1] the feed's bound, then the product keys.
-- Answers 'noted'.
note_changes(KEYS[1], KEYS[2], tonumber(ARGV[1]), 2, 1)
return 'noted'
