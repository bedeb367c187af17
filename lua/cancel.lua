-- cancel.lua: withdraw a waiter (timeout, interrupt, lost reply).
-- ARGV[10] id. Returns 0 = withdrawn from the queue, 1 = it had been granted in the meantime: the
-- permit is given back and passed on to the next waiter, -1 = unknown (expired or done).
local id = ARGV[10]
local now = now_ms()
load_classes() -- tag_queue, owner_of
note_gone(S, now, {id}, now + QMS) -- as release.lua
local result = -1
if redis.call('ZREM', S.Q, id) == 1 then
    unqueued(S, id)
    result = 0
elseif unhold(S, id) == 1 then
    result = 1
    observe_hold(S, redis.call('HGET', S.INFO, id), now)
end
if result ~= 1 then
    -- and its tag's queue ("-" for an untagged one: it queued there if classes were defined)
    redis.call('ZREM', K.tag_queue(S, shape_of(id) or '-'), id)
end
redis.call('ZREM', S.W, id)
redis.call('HDEL', S.INFO, id)
if result == 0 then
    count(S, 'cancelled')
end
reap(S, now)
pump(S, now)
touch(S)
return result
