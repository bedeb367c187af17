-- adapt.lua: the adaptive controller's lease and limit (dbthrottle adapt), on one semaphore.
-- Only the controller that holds the lease acts, so that two running controllers never both do.
-- The limit it sets is the operator's override key (S.LIM) WITH a TTL it refreshes while it leads:
-- when it dies the limit lapses and each worker's own applies again. The same key WITHOUT a TTL is
-- an operator's (dbthrottle limit): the controller then changes nothing until it is cleared.
-- Its record is the hash S.LIM .. ':adapt' (fields in _common.lua's key list).
-- ARG.op the operation (OP), then its arguments (lua/protocol/adapt.def):
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
-- Its reply: status, owner, owner's host, owner's pid, lease left ms, override or false, its PTTL,
-- granted waiters, now. status (STATUS): OK; NOT_LEADER (another token holds a live lease:
-- nothing changed); OPERATOR (TOKEN leads, but the limit key is an operator's: nothing set).
local op, token = ARG.op, ARG.token
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
local status, granted = STATUS.OK, 0
-- The limit key's TTL: -2 absent, -1 an operator's (no TTL), > 0 the controller's.
local function lim_pttl()
    return redis.call('PTTL', S.LIM)
end
if live and owner ~= token then
    status = STATUS.NOT_LEADER
elseif op == OP.LEASE then
    local lease_ms, ttl_ms = whole(ARG.lease_ms, 1), whole(ARG.ttl_ms, 1)
    local mn, mx = whole(ARG.min, 1), whole(ARG.max, 1)
    local interval_ms, window_ms = whole(ARG.interval_ms, 1), whole(ARG.window_ms, 0)
    if not (lease_ms and ttl_ms and mn and mx and interval_ms and window_ms) or mn > mx then
        return refuse('lease: bad arguments')
    end
    if owner ~= token then
        redis.call('HSET', R, 'owner', token, 'since', now)
    end
    owner, until_ms = token, now + lease_ms
    redis.call('HSET', R, 'lease_until', until_ms, 'host', ARG.host, 'pid', ARG.pid,
        'min', mn, 'max', mx, 'ttl_ms', ttl_ms, 'interval_ms', interval_ms, 'window_ms', window_ms)
    redis.call('PEXPIRE', R, COUNTER_TTL)
    local t = lim_pttl()
    if t > 0 then
        redis.call('PEXPIRE', S.LIM, ttl_ms)
    elseif t == -1 then
        status = STATUS.OPERATOR
    end
elseif op == OP.SET then
    local limit, reason = whole(ARG.limit, 1), ARG.reason
    local ttl_ms = whole(field('ttl_ms'), 1)
    if not limit then
        return refuse('set: limit "' .. tostring(ARG.limit) .. '" is not a whole number >= 1')
    end
    if not live then
        status = STATUS.NOT_LEADER -- its lease ran out (or it never took one): it may not act
    elseif not ttl_ms then
        return refuse('set: the record has no ttl_ms (lease first)')
    elseif lim_pttl() == -1 then
        status = STATUS.OPERATOR
    else
        redis.call('SET', S.LIM, limit, 'PX', ttl_ms)
        redis.call('HSET', R, 'limit', limit, 'reason', reason, 'changed_at', now)
        redis.call('PEXPIRE', R, COUNTER_TTL)
        -- what a new limit means for the pool, as admin.lua's limit: kept permits are called
        -- back, a process passing permits between its threads gives them back, and the waiters
        -- that now fit are granted
        K.recall_kept(S)
        K.end_sole(S, nil)
        K.end_shares(S)
        reap(S, now)
        granted = pump(S, now)
    end
elseif op == OP.RESIGN then
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
return reply{status = status, owner = (until_ms > now) and owner or '', owner_host = who[1] or '',
    owner_pid = tonumber(who[2]) or 0, lease_left = math.max(0, until_ms - now), override = override,
    override_pttl = lim_pttl(), granted = granted, now = now}
