-- admin.lua: the operator's controls of one semaphore (dbthrottle limit, drain, resume, evict).
-- ARG.op the operation (OP), ARG.arg its argument (lua/protocol/admin.def):
--   limit N  the override becomes every caller's limit; waiters that now fit are granted at once
--   clear    the override goes; each caller's own limit applies again
--   drain    no grant is made (waiters wait) until resume
--   resume   grants again, at once for the waiters that fit
--   evict ID frees one held permit by hand (all its units; ID may name one, "id#k") and passes
--            it on; its process is told at once to give back the permits it keeps between
--            commands ("r<kind>:<ticket>", as a waiter's arrival), and at its next renewal
--            learns that it was evicted ('e': renew.lua reports "e:ID"; so does every renewal that
--            names ID within two leases, the permit may be passing between processes of a host)
--   evict_cancel ID  the same, marked 'x': the process also cancels the command running on it
--   class_set NAME:SHARE:PRIORITY:WAIT_MS:CAP[:default]  defines (or redefines) a class in the
--            operator's definitions (":default": it becomes the default class); the shares of all
--            must sum to 100 at most, and a new class is refused when MAX_CLASSES are defined
--            (checked here, in the one script that writes them, so that no client exceeds it)
--   class_clear NAME  removes a class (its waiters and holders are served as the default class);
--            "*": every class and the aging bound (the workers' shipped definitions apply again)
--   aging MS the aging bound: a waiter queued MS ago is served next whatever its class; 0 = none
-- A bad value is refused with an error reply "ERR dbthrottle: ..." naming it; nothing changes.
-- Its reply: the granted waiters, holders, evicted (1/0), the evicted permit's info or false, now.
local op, arg = ARG.op, ARG.arg
local now = now_ms()
local evicted, info = 0, false
if op == OP.LIMIT then
    redis.call('SET', S.LIM, arg)
elseif op == OP.CLEAR then
    redis.call('DEL', S.LIM)
elseif op == OP.DRAIN then
    redis.call('SET', S.DRAIN, '1')
elseif op == OP.RESUME then
    redis.call('DEL', S.DRAIN)
elseif op == OP.EVICT or op == OP.EVICT_CANCEL then
    -- a weighted permit's unit member ("id#k", as the holders list it) names its permit: the
    -- permit goes, all its units (a unit alone would leave it running, under-counted)
    arg = string.match(arg, '^[^#]*')
    info = redis.call('HGET', S.INFO, arg)
    evicted = unhold(S, arg)
    if evicted == 1 then
        observe_hold(S, info, now)
        -- the reply names whose it was: "<since> <host> <pid> <conn>", as it always did
        info = info and string.match(info, '^[^\31]*')
        redis.call('HDEL', S.INFO, arg)
        local mark = (op == OP.EVICT) and EVICTED.PLAIN or EVICTED.CANCEL
        redis.call('HSET', S.INFO, 'evicted:' .. arg, mark) -- read once (by older clients' renew.lua)
        expire_new(S, S.INFO)
        -- The permit may be passing between processes of a host: the giver's renewal and the
        -- receiver's may both name it. Each one within two leases is answered "e:"/"x:" (the
        -- marker in GONE, read, never consumed), and the id itself is gone lawfully, so that no
        -- renewal takes its absence for data lost (a re-assertion and a quarantine). Two of the
        -- longest leases, not the command's own: its holders' lease may be longer (their own, or
        -- the pool's live one), and a renewal of theirs a lease/3 later must still find it.
        local forget = now + 2 * MAX_LEASE_MS
        redis.call('ZADD', S.GONE, forget, arg, forget, mark .. ':' .. arg)
        pexpire_at_least(S.GONE, 2 * MAX_LEASE_MS + QMS)
        count(S, 'evicted')
        -- Its unit is free now, and goes to the next caller at once: a process that keeps the
        -- permit between commands (DBTHROTTLE_CACHE_PERMITS) would run its next ones on it until
        -- a renewal told it (lease/3 later), beside the new holder. It is told now, as a waiter's
        -- arrival tells it: "r<kind>:<ticket>" on its wake list, so it gives back what it keeps
        -- (the host's shelf too) and asks Redis for its next command. A command running on the
        -- permit runs to its end, as before (evict_cancel cancels it at the renewal).
        K.recall_kept(S, {arg})
    else
        info = false
    end
elseif op == OP.CLASS_SET or op == OP.CLASS_CLEAR or op == OP.AGING then
    local function refuse(why)
        return redis.error_reply('ERR dbthrottle: ' .. why)
    end
    load_classes()
    -- the operator's own definitions (not a worker's shipped ones), started afresh if unreadable
    local d = K.parse_defs(defs_text(S.CLASSES) or '') or K.parse_defs('')
    -- Over the cap (written by hand or by an older version), a change would write back only the
    -- classes in force and drop the others unsaid: only clearing them all is taken.
    if d.over and not (op == OP.CLASS_CLEAR and arg == '*') then
        return refuse('the definitions hold more than ' .. MAX_CLASSES .. ' classes, the most a ' ..
            'pool may have (only the first ' .. MAX_CLASSES .. ' are in force): clear them all ' ..
            'first (dbthrottle class POOL --clear)')
    end
    if op == OP.CLASS_SET then
        local text, is_default = string.match(arg, '^(.*):default$')
        is_default = text ~= nil
        local c, err = K.parse_class(text or arg)
        if not c then
            return refuse(err)
        end
        if not d.by[c.name] then
            if #d.list >= MAX_CLASSES then
                local names = {}
                for i, old in ipairs(d.list) do
                    names[i] = old.name
                end
                return refuse('at most ' .. MAX_CLASSES .. ' classes per pool, and ' .. #d.list ..
                    ' are defined (' .. table.concat(names, ', ') .. '): class ' .. c.name ..
                    ' is not added')
            end
            d.list[#d.list + 1] = c
        end
        for i, old in ipairs(d.list) do
            if old.name == c.name then
                d.list[i] = c
            end
        end
        if is_default then
            d.default = c.name
        end
    elseif op == OP.CLASS_CLEAR and arg == '*' then
        d = K.parse_defs('')
    elseif op == OP.CLASS_CLEAR then
        if not d.by[arg] then
            return refuse('no class "' .. tostring(arg) .. '" is defined by the operator')
        end
        for i, old in ipairs(d.list) do
            if old.name == arg then
                table.remove(d.list, i)
                break
            end
        end
        if d.default == arg then
            d.default = ''
        end
    else
        d.aging = K.int_in(arg, 0, 2 ^ 52)
        if not d.aging then
            return refuse('aging "' .. tostring(arg) .. '" is not ms >= 0')
        end
    end
    local parts = {'aging=' .. d.aging, 'default=' .. d.default}
    local function none(v)
        return (v < 0) and '-' or string.format('%d', v)
    end
    for _, c in ipairs(d.list) do
        parts[#parts + 1] = c.name .. ':' .. c.share .. ':' .. c.priority .. ':' .. none(c.wait) ..
            ':' .. none(c.cap)
    end
    local text = table.concat(parts, ';')
    local ok, err = K.parse_defs(text)
    if not ok then
        return refuse(err)
    end
    if #d.list == 0 and d.aging == 0 then
        redis.call('DEL', S.CLASSES)
    else
        redis.call('SET', S.CLASSES, text)
    end
elseif op == OP.SETTING_SET or op == OP.SETTING_CLEAR then
    -- The pool's live settings (docs/design.md, "Live settings per pool"): one STRING per pool,
    -- "v<version>\n" then "key=value\n" lines, rewritten whole with the version one up, so that a
    -- renewal sees any change by its version alone. The values were checked by the command with
    -- the library's own parser; the workers check them again.
    local key = string.sub(S.LIM, 1, -#'q:limit' - 1) .. 'settings'
    local text = redis.call('GET', key) or ''
    local d = string.match(text, '^v(%d+)\n') or string.match(text, '^v(%d+)$')
    local version = (d and #d <= 15) and tonumber(d) or 0
    local vals, order = {}, {}
    for k, v in string.gmatch(text, '\n([^=\n]+)=([^\n]*)') do
        if vals[k] == nil then
            order[#order + 1] = k
        end
        vals[k] = v
    end
    if op == OP.SETTING_SET then
        local k, v = string.match(arg, '^([^=\n]+)=([^\n]*)$')
        if not k then
            return redis.error_reply('admin.lua: not key=value: ' .. arg)
        end
        if vals[k] == nil then
            order[#order + 1] = k
        end
        vals[k] = v
    elseif arg == '*' then
        vals = {}
    else
        vals[arg] = nil
    end
    -- Never a version some worker may have applied already: after Redis lost the key (restarted
    -- empty, a failover), counting from 0 again would repeat one, and a worker that applied it
    -- would keep its old value without a word. Redis' clock (ms) is past any earlier version.
    local lines = {'v' .. math.max(version + 1, now)}
    table.sort(order)
    for _, k in ipairs(order) do
        if vals[k] ~= nil then
            lines[#lines + 1] = k .. '=' .. vals[k]
        end
    end
    -- Never deleted: a worker that applied version N must see N + 1, even with nothing left.
    redis.call('SET', key, table.concat(lines, '\n') .. '\n')
else
    return redis.error_reply('admin.lua: unknown operation ' .. tostring(op))
end
-- Permits kept between commands would not see a new limit or a drain (see recall_kept).
if op == OP.DRAIN or op == OP.LIMIT then
    K.recall_kept(S)
end
-- A process passing permits between its own threads (local handover) would not see a new
-- limit, a drain, an eviction or new classes: it is told to stop and give its permits back to Redis.
if op ~= OP.CLEAR and op ~= OP.RESUME and op ~= OP.SETTING_SET and op ~= OP.SETTING_CLEAR then
    K.end_sole(S, nil)
    K.end_shares(S) -- and a host passing within its share (docs/design.md, "Shares")
end
reap(S, now)
local granted = pump(S, now)
return reply{granted = granted, holders = redis.call('ZCARD', S.H), evicted = evicted, info = info,
    now = now}
