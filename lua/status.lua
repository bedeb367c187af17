-- status.lua: one consistent snapshot of a pool's two semaphores for dbthrottle status and top,
-- by Redis' clock. Reads only: no reaping, no granting, no TTL refresh. KEYS[1..NK] the query
-- semaphore, KEYS[NK+1..2NK] the connection one. ARG.max_rows the most holders and waiters listed
-- per semaphore (0 = all); the counts are always whole. Its reply's fields: lua/protocol/status.def.
-- Returns {now, query, connection[, processes]}, each of the first two {limit seen or false, override or false, drained 0/1,
-- live holders, live waiters, {id, lease expiry, info, ...} of holders, {id, info, ...} of
-- waiters in queue order, {counter, value, ...}, quarantine ms left (0 = none), why or false,
-- classes}. Live holders counts units (a weighted permit's members "id#k" too); the list names
-- permits. classes: {aging ms, 1 when the definitions are a worker's shipped ones, then per class
-- {name, share, priority, wait_ms or -1, cap or -1, guarantee (at the override, else the limit
-- seen), units held, waiters, oldest wait ms, 1 for the default class (2: the implicit one, which
-- no definition names)}}; {0, 0} without classes.
-- Then the oldest current wait (ms: the longest waiting head of the main queue and of each tag's
-- queue; 0 none), the histograms' bucket bounds (ms, as text: HIST_BOUNDS) and the histograms
-- (HGETALL of hist: {"<series>:<i>:<class>" or "<series>:s:<class>", value, ...}).
-- Entries whose lease ran out are left out of all that; then the holders whose lease ran out but
-- who never released (still in the holders ZSET past their expiry: a stopped or cut-off holder
-- whose command may still run): their count in units and {id, lease expiry, info, ...} of the
-- permits (drain --wait must not call such a pool drained). Then the owner whose waiters are the
-- whole queue (owners['*']: a process' cid, or a host group G, that passes permits without
-- Redis), or false.
-- Then the override's PTTL (ms, as PTTL says it: -2 no override, -1 one without a TTL, set by
-- hand with dbthrottle limit; > 0 one with a TTL, the adaptive controller's) and the adaptive
-- controller's record (HGETALL of the override's key .. ':adapt', flat {field, value, ...}; {}
-- when there is none; the error's text when it cannot be read, a key of another type: status
-- still answers). Both are appended last, so that a parser of an older reply reads the rest as
-- before. Then, last, what is wrong with the stored class definitions, {one line, 1 when the
-- operator's hold more than MAX_CLASSES classes (only the first are in force: admin.lua takes
-- only a clear) else 0}, the operator's first (not valid: not in force; over the cap); false
-- when nothing is. Then, last, every live holder (a permit, not its units) and waiter counted for
-- the process its info names, {host, pid, held, queued, idle in a transaction, limits, ...}: the
-- process table's figures as Redis has them now (a process' record says them only as of its last
-- renewal, and a process that just began to hold would show nothing held for a renewal period),
-- and the limits its ids carry ("2" or "1,3": workers configured for different limits each wait
-- by their own, which status must say). Then how long the semaphore has been idle (ms, by its
-- counters' TTL, which every use that touches the keys sets to COUNTER_TTL again, at most TTL/2
-- late; 0 while anyone holds or waits; -1 without counters), for status' and the exporter's idle
-- filter. Then 1 when by_process counted every live id, 0 when it read only the first
-- BY_PROCESS_MAX (the process table then takes the processes' own records).
local max = ARG.max_rows
load_classes()
local now = now_ms()
local function info_of(s, id)
    return redis.call('HGET', s.INFO, id) or ''
end
-- How long s has been idle (see the top).
local function idle_of(s)
    if redis.call('ZCOUNT', s.H, now, '+inf') > 0 or redis.call('ZCOUNT', s.W, now, '+inf') > 0 then
        return 0
    end
    local left = redis.call('PTTL', s.STATS)
    return left >= 0 and math.max(0, COUNTER_TTL - left) or -1
end
-- The most live ids by_process reads (see below), and whether it read them all.
local BY_PROCESS_MAX = 1000
local function by_process_whole(s)
    local n = redis.call('ZCOUNT', s.H, now, '+inf') + redis.call('ZCOUNT', s.W, now, '+inf')
    return n <= BY_PROCESS_MAX and 1 or 0
end
-- The by_process table of s (see the top).
local function by_process(s)
    local out, at, limits = {}, {}, {}
    local function add(id, field)
        local info = info_of(s, id)
        local host, pid = string.match(info, '^%d+ (%S*) (%d+)')
        if not host then
            return
        end
        local key = host .. ' ' .. pid
        local i = at[key]
        if not i then
            i = #out + 1
            at[key] = i
            out[i], out[i + 1], out[i + 2], out[i + 3], out[i + 4] = host, tonumber(pid), 0, 0, 0
            limits[i] = {}
        end
        out[i + field] = out[i + field] + 1
        -- as the id writes it (a number beyond 2^53 stays the digits it was)
        limits[i][string.match(id, '^[^#]*%.(%d+)') or '1'] = true
        if field == 2 and string.match(info, '^[^\31]*\31([^\31]*)') == 'idle_tx' then
            out[i + 4] = out[i + 4] + 1
        end
    end
    -- The first BY_PROCESS_MAX live ids (holders' units included), not all: status, top, the
    -- exporter and the adaptive controller call this every second or so, and a read of a whole
    -- long queue would hold Redis (and every worker's call) that long each time.
    local held = redis.call('ZRANGEBYSCORE', s.H, now, '+inf', 'LIMIT', 0, BY_PROCESS_MAX)
    for _, id in ipairs(held) do
        if not string.find(id, '#', 1, true) then -- a weighted permit's other units
            add(id, 2)
        end
    end
    local room = BY_PROCESS_MAX - #held
    if room > 0 then
        for _, id in ipairs(redis.call('ZRANGEBYSCORE', s.W, now, '+inf', 'LIMIT', 0, room)) do
            add(id, 3)
        end
    end
    -- each process' limits after its counts, in ascending order
    local with = {}
    for i = 1, #out, 5 do
        local l = {}
        for limit in pairs(limits[i]) do
            l[#l + 1] = limit
        end
        table.sort(l, function(a, b)
            return #a < #b or (#a == #b and a < b) -- as numbers, without converting them
        end)
        for j = 0, 4 do
            with[#with + 1] = out[i + j]
        end
        with[#with + 1] = table.concat(l, ',')
    end
    return with
end
-- How long the head of queue key k has waited (ms), 0 when it is empty.
local function head_wait(s, k)
    local h = redis.call('ZRANGE', k, 0, 0)[1]
    local since = h and tonumber(string.match(info_of(s, h), '^(%d+) ') or '')
    return since and math.max(0, now - since) or 0
end
-- The class table of s (see the top), the guarantees at limit L.
local function classes(s, d, L)
    if not d then
        return {0, 0}
    end
    local st = {units = redis.call('ZCARD', s.H), held = {}, waiting = {}, oldest = {}}
    local tagged, others_waiting = 0, 0
    for _, t in ipairs(redis.call('ZRANGE', s.TAGS, 0, -1)) do
        local c = K.class_of(d, t).name
        local nh = redis.call('ZCARD', K.tag_holders(s, t))
        local nq = redis.call('ZCARD', K.tag_queue(s, t))
        st.held[c] = (st.held[c] or 0) + nh
        st.waiting[c] = (st.waiting[c] or 0) + nq
        st.oldest[c] = math.max(st.oldest[c] or 0, head_wait(s, K.tag_queue(s, t)))
        tagged = tagged + nh
        if c ~= d.dflt.name then
            others_waiting = others_waiting + nq
        end
    end
    local dn = d.dflt.name
    st.held[dn] = (st.held[dn] or 0) + math.max(0, st.units - tagged)
    st.waiting[dn] = math.max(st.waiting[dn] or 0, redis.call('ZCARD', s.Q) - others_waiting)
    local main = redis.call('ZRANGE', s.Q, 0, 0)[1]
    if main and K.class_of(d, (shape_of(main))) == d.dflt then
        st.oldest[dn] = math.max(st.oldest[dn] or 0, head_wait(s, s.Q))
    end
    local out = {d.aging, d.shipped and 1 or 0}
    local list = {}
    for _, c in ipairs(d.list) do
        list[#list + 1] = c
    end
    if d.dflt.implicit then
        list[#list + 1] = d.dflt
    end
    for _, c in ipairs(list) do
        out[#out + 1] = {c.name, c.share, c.priority, c.wait, c.cap, K.guarantee(c, L),
            st.held[c.name] or 0, st.waiting[c.name] or 0, st.oldest[c.name] or 0,
            (c == d.dflt) and (c.implicit and 2 or 1) or 0}
    end
    return out
end
-- The adaptive controller's record beside the override (see the top): pcall, so that a key of
-- another type there says what it is instead of failing the whole status.
local function adapt_record(s)
    local r = redis.pcall('HGETALL', s.LIM .. ':adapt')
    if type(r) == 'table' and r.err then
        return tostring(r.err)
    end
    return r
end
-- What is wrong with s' stored definitions (see the top), false when nothing; and the texts.
local function defs_problem(s)
    local texts, problem = {}, false
    for i, k in ipairs({{s.CLASSES, "the operator's"}, {s.CLASSES_SEEN, "a worker's shipped"}}) do
        local text, err = defs_text(k[1])
        texts[i] = text
        local d, bad = K.parse_defs(text)
        local over = 0
        if err then
            bad = 'cannot be read (' .. err .. ')'
        elseif text and not d then
            bad = 'are not valid (' .. bad .. '): not in force'
        elseif text and d.over then
            bad, over = 'hold more than ' .. MAX_CLASSES .. ' classes, the most a pool may have: ' ..
                'only the first ' .. #d.list .. ' are in force, the others are served as the ' ..
                'default class', (i == 1) and 1 or 0
        else
            bad = nil
        end
        if bad and not problem then
            problem = {k[2] .. ' class definitions (' .. k[1] .. ') ' .. bad, over}
        end
    end
    return problem, texts[1], texts[2]
end
local function snapshot(s)
    local c = redis.call('MGET', s.SEEN, s.LIM, s.DRAIN, s.ERA)
    local problem
    problem, c[5], c[6] = defs_problem(s)
    local qleft, why = 0, false
    if c[4] then
        local till, w = string.match(c[4], '^%S+ (%d+) (%S+)$')
        if till and tonumber(till) > now then
            qleft, why = tonumber(till) - now, w
        end
    end
    -- the permits, not their other units ("id#k"), a chunk at a time
    local holders, nheld, at = {}, 0, 0
    local hchunk = (max > 0) and math.max(2 * max, 16) or 1024
    while max == 0 or nheld < max do
        local hl = redis.call('ZRANGEBYSCORE', s.H, now, '+inf', 'WITHSCORES', 'LIMIT', at, hchunk)
        if #hl == 0 then
            break
        end
        for i = 1, #hl, 2 do
            if not string.find(hl[i], '#', 1, true) and (max == 0 or nheld < max) then
                holders[#holders + 1] = hl[i]
                holders[#holders + 1] = hl[i + 1]
                holders[#holders + 1] = info_of(s, hl[i])
                nheld = nheld + 1
            end
        end
        at = at + hchunk
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
    local oldest = head_wait(s, s.Q)
    for _, t in ipairs(redis.call('ZRANGE', s.TAGS, 0, -1)) do
        oldest = math.max(oldest, head_wait(s, K.tag_queue(s, t)))
    end
    local lapsed, nlapsed = {}, redis.call('ZCOUNT', s.H, '-inf', '(' .. now)
    if nlapsed > 0 then
        local ll = redis.call('ZRANGEBYSCORE', s.H, '-inf', '(' .. now, 'WITHSCORES', 'LIMIT', 0,
            (max > 0) and math.max(2 * max, 16) or 1024)
        for i = 1, #ll, 2 do
            if not string.find(ll[i], '#', 1, true) then
                lapsed[#lapsed + 1] = ll[i]
                lapsed[#lapsed + 1] = ll[i + 1]
                lapsed[#lapsed + 1] = info_of(s, ll[i])
            end
        end
    end
    local bounds = {}
    for i, b in ipairs(HIST_BOUNDS()) do
        bounds[i] = tostring(b) -- as text: a Lua number becomes an integer in the reply
    end
    return reply_semaphore{seen = c[1] or false, override = c[2] or false, drained = c[3] and 1 or 0,
        nholders = redis.call('ZCOUNT', s.H, now, '+inf'),
        nwaiters = redis.call('ZCOUNT', s.W, now, '+inf'), holders = holders, waiters = waiters,
        stats = redis.call('HGETALL', s.STATS), quarantine = qleft, why = why,
        classes = classes(s, K.effective_defs(c[5], c[6]), tonumber(c[2]) or tonumber(c[1]) or 0),
        oldest = oldest, bounds = bounds, hist = redis.call('HGETALL', s.HIST), nlapsed = nlapsed,
        lapsed = lapsed, sole = redis.call('HGET', s.OWN, '*'),
        override_pttl = redis.call('PTTL', s.LIM), adapt = adapt_record(s),
        classes_problem = problem, by_process = by_process(s), idle_ms = idle_of(s),
        by_process_whole = by_process_whole(s)}
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
local q = snapshot(semaphore(0, KIND_LETTER[0]))
local c = snapshot(semaphore(NK, KIND_LETTER[1]))
-- The pool's live settings (docs/design.md, "Live settings per pool"): the operator's key beside
-- the limit's, read undeclared as it is (pcall: a key of another type reads as none).
local settings = redis.pcall('GET', string.sub(KEYS[1], 1, -#'q:holders' - 1) .. 'settings')
if type(settings) ~= 'string' then
    settings = false
end
-- without the registry's keys the reply ends before the processes
return reply{now = now, query = q, connection = c,
    processes = KEYS[2 * NK + 2] and processes(KEYS[2 * NK + 1], KEYS[2 * NK + 2]) or nil,
    settings = settings}
