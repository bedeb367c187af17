-- adapt.lua: the adaptive controller's lease and limit (dbthrottle adapt), on one semaphore.
-- Only the controller that holds the lease acts, so that two running controllers never both do.
-- The limit it sets is the operator's override key (S.LIM) WITH a TTL it refreshes while it leads:
-- when it dies the limit lapses and each worker's own applies again. The same key WITHOUT a TTL is
-- an operator's (dbthrottle limit): the controller then changes nothing until it is cleared.
-- Its record is the hash S.LIM .. ':adapt' (fields in _common.lua's key list).
-- ARGV[10] the operation, then its arguments:
--   lease TOKEN LEASE_MS HOST PID MIN MAX TTL_MS INTERVAL_MS WINDOW_MS
--            takes the lease when nobody holds a live one (owner "" or lease_until <= now) or
--            TOKEN holds it, until now + LEASE_MS; while TOKEN leads and the limit key is the
--            controller's (it has a TTL), its TTL becomes TTL_MS again
--   set TOKEN LIMIT REASON
--            while TOKEN holds a live lease and the limit key is absent or has a TTL: the limit
--            becomes LIMIT for every worker (with the record's ttl_ms), the waiters that now fit
--            are granted at once, and kept permits are called back (as admin.lua's limit)
--   resign TOKEN
--            TOKEN's lease ends now (a standby takes over at once); the limit stays until its TTL
-- Returns {status, owner, owner's host, owner's pid, lease left ms, override or false, its PTTL,
-- granted waiters, now}. status: "ok"; "not_leader" (another token holds a live lease: nothing
-- changed); "operator" (TOKEN leads, but the limit key is an operator's: nothing set).
local op, token = ARGV[10], ARGV[11] or ''
local R = S.LIM .. ':adapt'
local now = now_ms()
local function refuse(why)
    return redis.error_reply('ERR dbthrottle: adapt.lua: ' .. why)
end
local function whole(v, lo)
    local n = tonumber(v)
    if n and n == math.floor(n) and n >= lo and n < 2 ^ 52 then
        return n
    end
    return nil
end
if token == '' then
    return refuse('no token')
end
-- HGET, not HMGET: the operator's documented ACL (docs/operations.md) has the one, not the other
local function field(name)
    return redis.call('HGET', R, name)
end
local owner, until_ms = field('owner') or '', tonumber(field('lease_until')) or 0
local live = owner ~= '' and until_ms > now
local status, granted = 'ok', 0
-- The limit key's TTL: -2 absent, -1 an operator's (no TTL), > 0 the controller's.
local function lim_pttl()
    return redis.call('PTTL', S.LIM)
end
if live and owner ~= token then
    status = 'not_leader'
elseif op == 'lease' then
    local lease_ms, ttl_ms = whole(ARGV[12], 1), whole(ARGV[17], 1)
    local mn, mx = whole(ARGV[15], 1), whole(ARGV[16], 1)
    local interval_ms, window_ms = whole(ARGV[18], 1), whole(ARGV[19], 0)
    if not (lease_ms and ttl_ms and mn and mx and interval_ms and window_ms) or mn > mx then
        return refuse('lease: bad arguments')
    end
    if owner ~= token then
        redis.call('HSET', R, 'owner', token, 'since', now)
    end
    owner, until_ms = token, now + lease_ms
    redis.call('HSET', R, 'lease_until', until_ms, 'host', ARGV[13] or '', 'pid', ARGV[14] or '',
        'min', mn, 'max', mx, 'ttl_ms', ttl_ms, 'interval_ms', interval_ms, 'window_ms', window_ms)
    redis.call('PEXPIRE', R, COUNTER_TTL)
    local t = lim_pttl()
    if t > 0 then
        redis.call('PEXPIRE', S.LIM, ttl_ms)
    elseif t == -1 then
        status = 'operator'
    end
elseif op == 'set' then
    local limit, reason = whole(ARGV[12], 1), ARGV[13] or ''
    local ttl_ms = whole(field('ttl_ms'), 1)
    if not limit then
        return refuse('set: limit "' .. tostring(ARGV[12]) .. '" is not a whole number >= 1')
    end
    if not live then
        status = 'not_leader' -- its lease ran out (or it never took one): it may not act
    elseif not ttl_ms then
        return refuse('set: the record has no ttl_ms (lease first)')
    elseif lim_pttl() == -1 then
        status = 'operator'
    else
        redis.call('SET', S.LIM, limit, 'PX', ttl_ms)
        redis.call('HSET', R, 'limit', limit, 'reason', reason, 'changed_at', now)
        redis.call('PEXPIRE', R, COUNTER_TTL)
        -- what a new limit means for the pool, as admin.lua's limit: kept permits are called
        -- back, a process passing permits between its threads gives them back, and the waiters
        -- that now fit are granted
        recall_kept(S)
        end_sole(S, nil)
        reap(S, now)
        granted = pump(S, now)
    end
elseif op == 'resign' then
    if owner == token then
        redis.call('HSET', R, 'owner', '', 'lease_until', 0)
        redis.call('PEXPIRE', R, COUNTER_TTL)
        owner, until_ms = '', 0
    end
else
    return refuse('unknown operation ' .. tostring(op))
end
local who = {'', ''}
if owner ~= '' and until_ms > now then
    who = {field('host'), field('pid')}
end
local override = tonumber(redis.call('GET', S.LIM) or '') or false
return {status, (until_ms > now) and owner or '', who[1] or '', tonumber(who[2]) or 0,
    math.max(0, until_ms - now), override, lim_pttl(), granted, now}
