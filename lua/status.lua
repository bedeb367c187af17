-- status.lua: one consistent snapshot of a pool's two semaphores for dbthrottle status and top,
-- by Redis' clock. Reads only: no reaping, no granting, no TTL refresh. KEYS[1..NK] the query
-- semaphore, KEYS[NK+1..2NK] the connection one. ARGV[10] the most holders and waiters listed
-- per semaphore (0 = all); the counts are always whole.
-- Returns {now, query, connection[, processes]}, each of the first two {limit seen or false, override or false, drained 0/1,
-- live holders, live waiters, {id, lease expiry, info, ...} of holders, {id, info, ...} of
-- waiters in queue order, {counter, value, ...}, quarantine ms left (0 = none), why or false,
-- classes}: classes is {aging ms, shipped 0/1, {name, share, priority, wait ms or -1, cap or -1,
-- guarantee, held units, waiters, oldest wait ms, is default 0/1}...} ({0, 0} without
-- definitions). The units of a weighted permit (id#2..id#w) are counted, never listed.
-- Entries whose lease ran out are left out.
local max = tonumber(ARGV[10]) or 0
local now = now_ms()
local function info_of(s, id)
    return redis.call('HGET', s.INFO, id) or ''
end
-- The oldest waiter of a per-tag queue: when it queued (INFO "since"), or nil.
local function oldest_since(s, tag)
    local head = redis.call('ZRANGE', s.Q .. ':' .. tag, 0, 0)
    if head[1] then
        return tonumber(string.match(info_of(s, head[1]), '^(%d+)'))
    end
end
-- Per class: its definition and what it holds and waits for. A tag no definition names, the
-- untagged ids and the tag '-' are the default class', which counts what the others do not.
local function classes(s, limit, nh, nw)
    local d, shipped = effective_classes(s)
    if not d then
        return {0, 0}
    end
    local list = {}
    for _, cl in ipairs(d.list) do
        list[#list + 1] = cl
    end
    local dflt = d.default
    if dflt == '' then
        list[#list + 1] = {name = 'default', share = 0, priority = 0, wait = '-', cap = '-'}
        dflt = 'default'
    end
    local named, held, waiting, since = {}, {}, {}, {}
    for _, cl in ipairs(list) do
        named[cl.name] = cl.name ~= dflt
    end
    local other_h, other_w = 0, 0
    local tags = redis.call('ZRANGE', s.TAGS, 0, -1)
    tags[#tags + 1] = '-'
    for _, tag in ipairs(tags) do
        local cls = named[tag] and tag or dflt
        if named[tag] then
            held[cls] = redis.call('ZCOUNT', s.H .. ':' .. tag, now, '+inf')
            waiting[cls] = redis.call('ZCARD', s.Q .. ':' .. tag)
            other_h, other_w = other_h + held[cls], other_w + waiting[cls]
        end
        local t = oldest_since(s, tag)
        if t and (not since[cls] or t < since[cls]) then
            since[cls] = t
        end
    end
    -- an untagged waiter at the main queue's head (a client before classes) is the default's
    local head = redis.call('ZRANGE', s.Q, 0, 0)[1]
    if head and not string.match(head, '^[^.]*%.[^.]*%.[^.]*%.') then
        local t = tonumber(string.match(info_of(s, head), '^(%d+)'))
        if t and (not since[dflt] or t < since[dflt]) then
            since[dflt] = t
        end
    end
    held[dflt] = math.max(nh - other_h, 0)
    waiting[dflt] = math.max(nw - other_w, 0)
    local out = {d.aging, shipped and 1 or 0}
    for _, cl in ipairs(list) do
        local g = math.floor(limit * cl.share / 100)
        if cl.share > 0 and g < 1 then
            g = 1
        end
        out[#out + 1] = {cl.name, cl.share, cl.priority, tonumber(cl.wait) or -1,
            tonumber(cl.cap) or -1, g, held[cl.name] or 0, waiting[cl.name] or 0,
            since[cl.name] and (now - since[cl.name]) or 0, cl.name == dflt and 1 or 0}
    end
    return out
end
local function snapshot(s)
    local c = redis.call('MGET', s.SEEN, s.LIM, s.DRAIN, s.ERA)
    local qleft, why = 0, false
    if c[4] then
        local till, w = string.match(c[4], '^%S+ (%d+) (%S+)$')
        if till and tonumber(till) > now then
            qleft, why = tonumber(till) - now, w
        end
    end
    local holders = {}
    local hl
    if max > 0 then
        hl = redis.call('ZRANGEBYSCORE', s.H, now, '+inf', 'WITHSCORES', 'LIMIT', 0, max)
    else
        hl = redis.call('ZRANGEBYSCORE', s.H, now, '+inf', 'WITHSCORES')
    end
    for i = 1, #hl, 2 do
        if not string.find(hl[i], '#', 1, true) then
        holders[#holders + 1] = hl[i]
        holders[#holders + 1] = hl[i + 1]
        holders[#holders + 1] = info_of(s, hl[i])
        end
    end
    -- the queue in ticket order, skipping waiters whose lease ran out, a chunk at a time
    local waiters, listed, from = {}, 0, 0
    local chunk = (max > 0) and math.max(max, 16) or 1024
    while max == 0 or listed < max do
        local q = redis.call('ZRANGE', s.Q, from, from + chunk - 1)
        if #q == 0 then
            break
        end
        for _, id in ipairs(q) do
            local e = tonumber(redis.call('ZSCORE', s.W, id))
            if e and e >= now and (max == 0 or listed < max) then
                waiters[#waiters + 1] = id
                waiters[#waiters + 1] = info_of(s, id)
                listed = listed + 1
            end
        end
        from = from + chunk
    end
    local nh, nw = redis.call('ZCOUNT', s.H, now, '+inf'), redis.call('ZCOUNT', s.W, now, '+inf')
    return {c[1] or false, c[2] or false, c[3] and 1 or 0, nh, nw, holders, waiters,
        redis.call('HGETALL', s.STATS), qleft, why, classes(s, tonumber(c[2] or c[1]) or 0, nh, nw)}
end
-- The processes that use the pool (renew.lua keeps their records): {cid, expiry, record, ...} of
-- those not expired, when the caller passes the registry's keys (KEYS[2NK+1], KEYS[2NK+2]).
local function processes(procs, pinfo)
    local out = {}
    local live = redis.call('ZRANGEBYSCORE', procs, now, '+inf', 'WITHSCORES')
    for i = 1, #live, 2 do
        out[#out + 1] = live[i]
        out[#out + 1] = live[i + 1]
        out[#out + 1] = redis.call('HGET', pinfo, live[i]) or ''
    end
    return out
end
local q = snapshot(semaphore(0, 'q'))
local c = snapshot(semaphore(NK, 'c'))
if KEYS[2 * NK + 2] then
    return {now, q, c, processes(KEYS[2 * NK + 1], KEYS[2 * NK + 2])}
end
return {now, q, c}
