-- status.lua: one consistent snapshot of a pool's two semaphores for dbthrottle status and top,
-- by Redis' clock. Reads only: no reaping, no granting, no TTL refresh. KEYS[1..NK] the query
-- semaphore, KEYS[NK+1..2NK] the connection one. ARGV[10] the most holders and waiters listed
-- per semaphore (0 = all); the counts are always whole.
-- Returns {now, query, connection[, processes]}, each of the first two {limit seen or false, override or false, drained 0/1,
-- live holders, live waiters, {id, lease expiry, info, ...} of holders, {id, info, ...} of
-- waiters in queue order, {counter, value, ...}, quarantine ms left (0 = none), why or false}.
-- Entries whose lease ran out are left out.
local max = tonumber(ARGV[10]) or 0
local now = now_ms()
local function info_of(s, id)
    return redis.call('HGET', s.INFO, id) or ''
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
        holders[#holders + 1] = hl[i]
        holders[#holders + 1] = hl[i + 1]
        holders[#holders + 1] = info_of(s, hl[i])
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
    return {c[1] or false, c[2] or false, c[3] and 1 or 0, redis.call('ZCOUNT', s.H, now, '+inf'),
        redis.call('ZCOUNT', s.W, now, '+inf'), holders, waiters, redis.call('HGETALL', s.STATS),
        qleft, why}
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
