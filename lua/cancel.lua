-- cancel.lua: withdraw a waiter (timeout, interrupt, lost reply).
-- ARGV[5] id. Returns 0 = withdrawn from the queue, 1 = it had been granted in the meantime: the
-- permit is given back and passed on to the next waiter, -1 = unknown (expired or done).
local id = ARGV[5]
local now = now_ms()
local result = -1
if redis.call('ZREM', Q, id) == 1 then
    unqueued(id)
    result = 0
elseif redis.call('ZREM', H, id) == 1 then
    result = 1
end
redis.call('ZREM', W, id)
redis.call('HDEL', INFO, id)
if result == 0 then
    count('cancelled')
end
reap(now)
pump(now)
touch()
return result
