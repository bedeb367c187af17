-- renew.lua: extend the leases of one process' holders and waiters of both kinds of a pool in
-- one call, and keep the queues live (an expired holder is reaped and its permit granted even
-- when nobody releases). KEYS[1..NK] the query semaphore, KEYS[NK+1..2NK] the connection one.
-- ARGV[5..8] counts: query holders, query waiters, connection holders, connection waiters;
-- then the ids in that order; then, optionally, for each kind what the process did without Redis
-- since its last renewal (local handover): grants, queued, wait_ms, added to the counters.
-- Returns {lost holders ("e:ID" or "x:ID" for one evicted by hand, see admin.lua), lost waiters, granted waiters, {queue length of each kind}, {whether
-- local handover may go on, per kind: not while drained or over the operator's limit}}: ids Redis no
-- longer has (expired, or Redis lost its data), whose owners must not believe they hold or wait
-- any more; waiters Redis already granted, so a grant whose pushed message went astray still
-- reaches its owner; and whether anybody waits, so that a process keeping permits between
-- commands gives them back even if the push that says so went astray (a connection lost with
-- the popped message, a Redis restored from a snapshot).
-- Where the arguments after the four common ones start: the four counts, then the ids.
local COUNTS_AT = 5 -- ARGV[5..8]: query holders, query waiters, connection holders, waiters
local IDS_AT = COUNTS_AT + 4
local now = now_ms()
local exp = now + LEASE
local lost_h, lost_w, granted_w = {}, {}, {}
local at = IDS_AT
local function renew_holders(s, n)
    for i = at, at + n - 1 do
        if redis.call('ZSCORE', s.H, ARGV[i]) then
            redis.call('ZADD', s.H, 'XX', exp, ARGV[i])
        else
            -- "e:ID" / "x:ID" when the operator evicted it (and asked for its command's cancel)
            local ev = redis.call('HGET', s.INFO, 'evicted:' .. ARGV[i])
            if ev then
                redis.call('HDEL', s.INFO, 'evicted:' .. ARGV[i])
                lost_h[#lost_h + 1] = ev .. ':' .. ARGV[i]
            else
                lost_h[#lost_h + 1] = ARGV[i]
            end
        end
    end
    at = at + n
end
local function renew_waiters(s, n)
    for i = at, at + n - 1 do
        local id = ARGV[i]
        if redis.call('ZSCORE', s.W, id) and redis.call('ZSCORE', s.Q, id) then
            redis.call('ZADD', s.W, 'XX', exp, id)
        elseif redis.call('ZSCORE', s.H, id) then
            -- granted (the grant is on its way, or was lost): renew it as a holder, and say so
            redis.call('ZADD', s.H, 'XX', exp, id)
            granted_w[#granted_w + 1] = id
        else
            lost_w[#lost_w + 1] = id
        end
    end
    at = at + n
end
local queued, allowed = {}, {}
local nids = 0
for i = COUNTS_AT, COUNTS_AT + 3 do
    nids = nids + tonumber(ARGV[i])
end
local local_at = IDS_AT + nids -- the local counts, after the ids
for k = 0, 1 do
    local s = semaphore(NK * k, (k == 0) and 'q' or 'c')
    renew_holders(s, tonumber(ARGV[COUNTS_AT + 2 * k]))
    renew_waiters(s, tonumber(ARGV[COUNTS_AT + 1 + 2 * k]))
    for j, field in ipairs({'grants', 'queued', 'wait_ms'}) do
        local n = tonumber(ARGV[local_at + 3 * k + j - 1]) or 0
        if n > 0 then
            count(s, field, n)
        end
    end
    reap(s, now)
    pump(s, now)
    -- A renewal of nothing (an idle process' heartbeat, which keeps its record) does not keep
    -- an idle pool's keys alive.
    if nids > 0 then
        touch(s)
    end
    queued[k + 1] = redis.call('ZCARD', s.Q)
    -- whether local handover may go on: not while drained or held above the operator's limit
    local override, drained = controls(s)
    local ok = not drained and (not override or redis.call('ZCARD', s.H) <= override)
    allowed[k + 1] = ok and 1 or 0
end
-- The process record (dbthrottle status lists the processes of a pool): KEYS[2NK+1] a ZSET of
-- client id -> when its record expires, KEYS[2NK+2] a HASH of client id -> "<seen ms>\t<record>"
-- (the record's fields: script_protocol.h). ARGV after the local counts: the client id, the
-- record, how long it lives (ms), and "1" when the process leaves (the record goes). Expired
-- records are removed a batch at a time; the two keys live as long as their longest record.
local PROCS, PINFO = KEYS[2 * NK + 1], KEYS[2 * NK + 2]
local rec_at = local_at + 6
if PROCS and PINFO and ARGV[rec_at + 3] then
    local cid, rttl = ARGV[rec_at], tonumber(ARGV[rec_at + 2])
    if ARGV[rec_at + 3] == '1' then
        redis.call('ZREM', PROCS, cid)
        redis.call('HDEL', PINFO, cid)
    else
        redis.call('ZADD', PROCS, now + rttl, cid)
        redis.call('HSET', PINFO, cid, now .. '\t' .. ARGV[rec_at + 1])
        for _, k in ipairs({PROCS, PINFO}) do
            if redis.call('PTTL', k) < rttl then
                redis.call('PEXPIRE', k, rttl)
            end
        end
    end
    local gone = redis.call('ZRANGEBYSCORE', PROCS, '-inf', now, 'LIMIT', 0, REAP_BATCH)
    if #gone > 0 then
        redis.call('ZREM', PROCS, unpack(gone))
        redis.call('HDEL', PINFO, unpack(gone))
    end
end
return {lost_h, lost_w, granted_w, queued, allowed}
