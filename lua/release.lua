-- release.lua: give a permit back and grant the head of the queue.
-- ARGV[5] id. Returns 1 if the permit was held, 0 if it was not (expired, or already released).
local now = now_ms()
local removed = redis.call('ZREM', H, ARGV[5])
redis.call('HDEL', INFO, ARGV[5])
reap(now)
pump(now)
touch()
return removed
