-- admin.lua: the operator's controls of one semaphore (dbthrottle limit, drain, resume, evict).
-- ARGV[10] operation, ARGV[11] its argument:
--   limit N  the override becomes every caller's limit; waiters that now fit are granted at once
--   clear    the override goes; each caller's own limit applies again
--   drain    no grant is made (waiters wait) until resume
--   resume   grants again, at once for the waiters that fit
--   evict ID frees one held permit by hand and passes it on; its process, at its next renewal,
--            learns that it was evicted (the field "evicted:ID" of info, 'e', which renew.lua
--            reports and deletes)
--   evict_cancel ID  the same, marked 'x': the process also cancels the command running on it
-- Returns {granted waiters, holders, evicted (1/0), the evicted permit's info or false, now}.
local op, arg = ARGV[10], ARGV[11]
local now = now_ms()
local evicted, info = 0, false
if op == 'limit' then
    redis.call('SET', S.LIM, arg)
elseif op == 'clear' then
    redis.call('DEL', S.LIM)
elseif op == 'drain' then
    redis.call('SET', S.DRAIN, '1')
elseif op == 'resume' then
    redis.call('DEL', S.DRAIN)
elseif op == 'evict' or op == 'evict_cancel' then
    info = redis.call('HGET', S.INFO, arg)
    evicted = redis.call('ZREM', S.H, arg)
    if evicted == 1 then
        redis.call('HDEL', S.INFO, arg)
        redis.call('HSET', S.INFO, 'evicted:' .. arg, (op == 'evict') and 'e' or 'x')
        expire_new(S, S.INFO)
        count(S, 'evicted')
    else
        info = false
    end
else
    return redis.error_reply('admin.lua: unknown operation ' .. tostring(op))
end
-- A process passing permits between its own threads (local handover) would not see a new
-- limit, a drain or an eviction: it is told to stop and give its permits back to Redis.
if op == 'limit' or op == 'drain' or op == 'evict' or op == 'evict_cancel' then
    end_sole(S, nil)
end
reap(S, now)
local granted = pump(S, now)
return {granted, redis.call('ZCARD', S.H), evicted, info, now}
