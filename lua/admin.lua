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
--   class_set NAME:SHARE:PRIORITY:WAIT:CAP[:default]  defines (or redefines) a class in the
--            operator's definitions (S.CLASSES); WAIT and CAP '-' for none
--   class_clear NAME  removes one class; '*' removes every definition (the aging bound too)
--   aging MS the aging bound of the operator's definitions (0: none)
-- A bad value is refused with an error reply "ERR dbthrottle: ..." naming it.
-- Returns {granted waiters, holders, evicted (1/0), the evicted permit's info or false, now}.
local op, arg = ARGV[10], ARGV[11]
local now = now_ms()
local evicted, info = 0, false
local function refuse(fmt, ...)
    return redis.error_reply('ERR dbthrottle: ' .. string.format(fmt, ...))
end
local function int_in(text, lo, hi)
    local v = string.match(text or '', '^-?%d+$') and tonumber(text)
    return v and v >= lo and v <= hi and v
end
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
elseif op == 'class_set' then
    local n, sh, pr, w, c, dflt = string.match(arg, '^([^:]*):([^:]*):([^:]*):([^:]*):([^:]*)(.*)$')
    if not n then
        return refuse('class definition "%s": expected name:share:priority:wait:cap', arg)
    end
    if #n < 1 or #n > 32 or not string.match(n, '^[a-z0-9_-]+$') or n == '-' then
        return refuse('class name "%s": 1 to 32 of a-z, 0-9, _ and - (not "-" alone)', n)
    end
    local share, prio = int_in(sh, 0, 100), int_in(pr, -1000, 1000)
    if not share then
        return refuse('share "%s" of class %s: an integer percent from 0 to 100', sh, n)
    end
    if not prio then
        return refuse('priority "%s" of class %s: an integer from -1000 to 1000', pr, n)
    end
    if w ~= '-' and not int_in(w, 0, 86400000) then
        return refuse('wait "%s" of class %s: milliseconds from 0 to 86400000, or -', w, n)
    end
    if c ~= '-' and not int_in(c, 0, 1000000000) then
        return refuse('queue cap "%s" of class %s: an integer >= 0, or -', c, n)
    end
    if dflt ~= '' and dflt ~= ':default' then
        return refuse('class definition "%s": unexpected "%s"', arg, dflt)
    end
    local d = parse_classes(redis.call('GET', S.CLASSES)) or {aging = 0, default = '', list = {}}
    local def = {name = n, share = share, priority = prio, wait = w, cap = c}
    local sum, found = share, false
    for i, cl in ipairs(d.list) do
        if cl.name == n then
            d.list[i], found = def, true
        else
            sum = sum + cl.share
        end
    end
    if sum > 100 then
        return refuse('shares would sum to %d%% with class %s at %d%%: at most 100%%', sum, n, share)
    end
    if not found then
        d.list[#d.list + 1] = def
    end
    if dflt == ':default' then
        d.default = n
    end
    redis.call('SET', S.CLASSES, format_classes(d))
elseif op == 'class_clear' then
    local d = parse_classes(redis.call('GET', S.CLASSES))
    if arg == '*' or not d then
        redis.call('DEL', S.CLASSES)
    else
        local kept = {}
        for _, cl in ipairs(d.list) do
            if cl.name ~= arg then
                kept[#kept + 1] = cl
            end
        end
        d.list = kept
        if d.default == arg then
            d.default = ''
        end
        if #kept == 0 and d.aging == 0 then
            redis.call('DEL', S.CLASSES)
        else
            redis.call('SET', S.CLASSES, format_classes(d))
        end
    end
elseif op == 'aging' then
    local ms = int_in(arg, 0, 86400000)
    if not ms then
        return refuse('aging "%s": milliseconds from 0 to 86400000', arg)
    end
    local d = parse_classes(redis.call('GET', S.CLASSES)) or {aging = 0, default = '', list = {}}
    d.aging = ms
    if ms == 0 and #d.list == 0 then
        redis.call('DEL', S.CLASSES)
    else
        redis.call('SET', S.CLASSES, format_classes(d))
    end
else
    return redis.error_reply('admin.lua: unknown operation ' .. tostring(op))
end
-- A process passing permits between its own threads (local handover) would not see a new
-- limit, a drain or an eviction: it is told to stop and give its permits back to Redis.
if op ~= 'clear' and op ~= 'resume' then
    end_sole(S, nil)
end
reap(S, now)
local granted = pump(S, now)
return {granted, redis.call('ZCARD', S.H), evicted, info, now}
