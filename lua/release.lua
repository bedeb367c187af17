-- release.lua: give a permit back and grant the head of the queue.
-- ARGV[5] id. Returns 1 if the permit was held, 0 if it was not (expired, or already released).
local now = now_ms()
local removed = redis.call('ZREM', S.H, ARGV[5])
redis.call('HDEL', S.INFO, ARGV[5])
reap(S, now)
pump(S, now)
touch(S)
return removed
