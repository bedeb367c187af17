-- renew.lua: extend the leases of one process' holders and waiters of both kinds of a pool in
-- one call, and keep the queues live (an expired holder is reaped and its permit granted even
-- when nobody releases). KEYS[1..NK] the query semaphore, KEYS[NK+1..2NK] the connection one.
-- ARGV[5..8] counts: query holders, query waiters, connection holders, connection waiters;
-- then the ids in that order; then, optionally, for each kind what the process did without Redis
-- since its last renewal (local handover): grants, queued, wait_ms, added to the counters.
-- Returns {lost holders, lost waiters, granted waiters, {queue length of each kind}, {whether
-- local handover may go on, per kind: not while drained or over the operator's limit}}: ids Redis no
-- longer has (expired, or Redis lost its data), whose owners must not believe they hold or wait
-- any more; waiters Redis already granted, so a grant whose pushed message went astray still
-- reaches its owner; and whether anybody waits, so that a process keeping permits between
-- commands gives them back even if the push that says so went astray (a connection lost with
-- the popped message, a Redis restored from a snapshot).
local now = now_ms()
local exp = now + LEASE
local lost_h, lost_w, granted_w = {}, {}, {}
local at = 9
local function renew_holders(n)
    for i = at, at + n - 1 do
        if redis.call('ZSCORE', H, ARGV[i]) then
            redis.call('ZADD', H, 'XX', exp, ARGV[i])
        else
            lost_h[#lost_h + 1] = ARGV[i]
        end
    end
    at = at + n
end
local function renew_waiters(n)
    for i = at, at + n - 1 do
        local id = ARGV[i]
        if redis.call('ZSCORE', W, id) and redis.call('ZSCORE', Q, id) then
            redis.call('ZADD', W, 'XX', exp, id)
        elseif redis.call('ZSCORE', H, id) then
            -- granted (the grant is on its way, or was lost): renew it as a holder, and say so
            redis.call('ZADD', H, 'XX', exp, id)
            granted_w[#granted_w + 1] = id
        else
            lost_w[#lost_w + 1] = id
        end
    end
    at = at + n
end
local queued, allowed = {}, {}
local nids = 0
for i = 5, 8 do
    nids = nids + tonumber(ARGV[i])
end
local local_at = 9 + nids -- the local counts, after the ids
for k = 0, 1 do
    use_keys(NK * k)
    KIND = (k == 0) and 'q' or 'c'
    renew_holders(tonumber(ARGV[5 + 2 * k]))
    renew_waiters(tonumber(ARGV[6 + 2 * k]))
    for j, field in ipairs({'grants', 'queued', 'wait_ms'}) do
        local n = tonumber(ARGV[local_at + 3 * k + j - 1]) or 0
        if n > 0 then
            count(field, n)
        end
    end
    reap(now)
    pump(now)
    touch()
    queued[k + 1] = redis.call('ZCARD', Q)
    -- whether local handover may go on: not while drained or held above the operator's limit
    local override, drained = controls()
    local ok = not drained and (not override or redis.call('ZCARD', H) <= override)
    allowed[k + 1] = ok and 1 or 0
end
return {lost_h, lost_w, granted_w, queued, allowed}
