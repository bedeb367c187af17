-- cancel.lua: withdraw a waiter (timeout, interrupt, lost reply).
-- ARG.id, ARG.gave_up (lua/protocol/cancel.def). Returns its OUTCOME: WITHDRAWN from the queue, RETURNED (it
-- had been granted in the meantime: the permit is given back and passed on to the next waiter),
-- UNKNOWN (expired or done).
local id = ARG.id
local now = now_ms()
load_classes() -- tag_queue, owner_of
note_gone(S, now, {id}, now + QMS) -- as release.lua
local result = OUTCOME.UNKNOWN
if redis.call('ZREM', S.Q, id) == 1 then
    K.unqueued(S, id)
    result = OUTCOME.WITHDRAWN
elseif unhold(S, id) == 1 then
    result = OUTCOME.RETURNED
    observe_hold(S, redis.call('HGET', S.INFO, id), now)
end
if result ~= OUTCOME.RETURNED then
    -- and its tag's queue ("-" for an untagged one: it queued there if classes were defined)
    redis.call('ZREM', K.tag_queue(S, shape_of(id) or '-'), id)
end
redis.call('ZREM', S.W, id)
redis.call('HDEL', S.INFO, id)
if result == OUTCOME.WITHDRAWN and ARG.gave_up then
    count(S, 'cancelled')
end
reap(S, now)
pump(S, now)
touch(S)
return result
