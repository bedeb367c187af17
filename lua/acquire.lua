-- acquire.lua: take a permit now, or join the queue.
-- Its arguments (ARG) and its reply's fields: lua/protocol/acquire.def. The class definitions the
-- caller ships (ARG.shipped, DBTHROTTLE_CLASSES as definition text) are kept in classes_seen, in
-- force while the operator has defined none; its session (ARG.session) is kept in info.
-- The reply's status (GRANT): GRANTED; QUEUED (a grant will be pushed); NOT_GRANTED (try only);
-- QUEUE_FULL (refused: its class has as many waiters as its queue cap).
--   In quarantine nothing is granted: the caller queues (try only: is refused).
--   ticket: the waiter's place (queued); granted: the ticket counter now, which orders the grant
--   against the revokes ("r<kind>:<ticket>") pushed to its process (see below); else 0
--   sole: 1 when the queue holds this process' waiters only (queued only, else 0): see below
local id, limit, try_only, who = ARG.id, tonumber(ARG.limit), ARG.try_only, ARG.who
local shipped = ARG.shipped
local session = ARG.session
-- Shadow mode (DBTHROTTLE_MODE=shadow; docs/design.md, "Shadow mode"): the caller never queues
-- and is never refused. It is granted as anyone is, above the limit too, so that the holders count
-- the fleet's true concurrency, and the reply says what enforcing would have done (would).
local shadow = ARG.shadow
local now = now_ms()
-- Every acquire sends a new id, so one that already left (cancelled or released: GONE) is an
-- acquire that reached Redis after the cancel its caller owed for it: the caller timed out on a
-- stalled or slow Redis and gave up, and Redis, once it ran again, served the other connection
-- first. Served, it would hold a permit or a place nobody renews or gives back for a lease.
if TOKEN ~= '' and redis.call('ZSCORE', S.GONE, id) then
    return reply{status = GRANT.NOT_GRANTED, holders = redis.call('ZCARD', S.H),
        queue = redis.call('ZCARD', S.Q)}
end
-- A worker's default definitions become every worker's while the operator has none: written when
-- they differ from what is there (and are valid), with the TTL of the pool's other keys.
if shipped ~= '' and defs_text(S.CLASSES_SEEN) ~= shipped then
    load_classes()
    local d = K.parse_defs(shipped) -- (over the cap: not from this version's workers)
    if d and not d.over then
        redis.call('SET', S.CLASSES_SEEN, shipped, 'PX', floor_ttl(S))
    end
end
reap(S, now)
pump(S, now)

-- limit_seen paces the TTL refresh of every key (see touch): changing its value must not change
-- its TTL, and when it is new, every key is refreshed at once.
local seen = redis.call('GET', S.SEEN)
local fresh = not seen
if seen ~= ARG.limit then
    if seen then
        redis.call('SET', S.SEEN, ARG.limit, 'KEEPTTL')
    else
        S.seen_pttl = floor_ttl(S)
        redis.call('SET', S.SEEN, ARG.limit, 'PX', S.seen_pttl)
    end
end
if seen == ARG.limit then
    seen = false
end

-- No barging: a newcomer is admitted only when nobody is queued (or, with classes, when selection
-- would pick it before every waiter). The operator's override, when set, is every caller's limit;
-- while the pool is drained, everyone queues. Its permit takes its weight in units, cut to the
-- limit (it then runs alone).
-- One MGET reads the ticket counter (no command below changes it before the reply's ticket or the
-- recall's) and the operator's controls (controls() takes them, unless pump read them already).
local pre = redis.call('MGET', S.SEQ, S.LIM, S.DRAIN, S.ERA)
local seq = tonumber(pre[1] or '0')
local override, drained, q = controls(S, now, pre, 2)
local d = S.defs
local cls = d and K.class_of(d, (shape_of(id)))
local klass, cwait, ccap = cls and cls.name or false, cls and cls.wait or -1, cls and cls.cap or -1
-- Every reply from here tells the caller the class it is served as and the limit seen.
local function answer(r)
    r.limit_seen, r.class_name, r.class_wait, r.class_cap = seen, klass, cwait, ccap
    return reply(r)
end
local L = override or limit
local w, clamped = units_at(id, L)
local holders = redis.call('ZCARD', S.H)
local waiting = S.idle and 0 or redis.call('ZCARD', S.Q) -- (pump found it empty: unchanged since)
local fits = not drained and q == 0 and holders + w <= L
local grant = fits and waiting == 0
local st
if d and waiting > 0 then
    st = K.class_state(S, d)
    if fits then
        local pick = K.choose(S, d, st, now, {id = id})
        grant = pick ~= nil and pick.id == id
    end
end
-- What enforcing would have done, for a shadow caller that would not have been granted: refused
-- (it does not wait, or its class's queue is at its cap), else queued. It is granted all the same:
-- no ticket, no place in the queue, no recall of kept permits.
local would = WOULD.RUN
if not grant and shadow then
    would = WOULD.WAIT
    if try_only then
        would = WOULD.REFUSE
    elseif cls and cls.cap >= 0 then
        st = st or K.class_state(S, d)
        if (st.waiting[cls.name] or 0) >= cls.cap then
            would = WOULD.REFUSE
        end
    end
    count(S, would == WOULD.WAIT and 'would_wait' or 'would_refuse')
    grant = true
end
if grant then
    hold(S, id, w, now + LEASE, holders)
    note_who(S, id, now, who, 'running', klass or '', session)
    count(S, 'grants')
    observe(S, 'w', klass or '', 0)
    if clamped then
        count(S, 'clamped')
    end
    touch(S, fresh)
    -- the queue length: 0, or the waiters a class under its guarantee was granted past (its
    -- process must not keep the permit idle while they wait)
    return answer{status = GRANT.GRANTED, holders = holders + w, queue = waiting,
        ticket = seq, would = would}
end
if try_only then
    count(S, 'refused')
    touch(S, fresh)
    return answer{status = GRANT.NOT_GRANTED, holders = holders, queue = waiting, quarantine = q,
        why = S.why}
end
-- A class's queue cap: a command that would queue past it is refused at once.
if cls and cls.cap >= 0 then
    local mine = st and (st.waiting[cls.name] or 0) or 0
    if mine >= cls.cap then
        count(S, 'capped')
        touch(S, fresh)
        return answer{status = GRANT.QUEUE_FULL, holders = holders, queue = waiting,
            quarantine = q, why = S.why}
    end
end
-- The first waiter of a contention asks every process that holds a permit to give back the ones it
-- keeps idle between commands (DBTHROTTLE_CACHE_PERMITS), and not to keep any until it is granted
-- again with nobody queued: "r<kind>:<ticket>" on its wake list, with the ticket this waiter
-- takes, so that a grant's reply read after it (whose ticket is lower: it was granted before) does
-- not undo it. Once per transition from an empty queue, one push per holding process and one per
-- holding host group (O(holders), at most twice the limit); while the queue stays non-empty no permit is granted to anyone
-- who would keep it (grants from the queue are never kept).
if waiting == 0 and holders > 0 then -- (the queue is as counted above: nothing since changed it)
    K.recall(S, seq + 1)
end
load_classes() -- the queueing path's functions
local ticket = redis.call('INCR', S.SEQ)
redis.call('ZADD', S.Q, ticket, id)
K.queue_tag(S, id, ticket)
redis.call('ZADD', S.W, now + LEASE, id)
note_who(S, id, now, who, '', '', session)
count(S, 'queued')
expire_new(S, S.SEQ)
expire_new(S, S.Q)
expire_new(S, S.W)
-- Local handover. While every queued waiter is of one process, that process may pass a permit one
-- of its threads gives back straight to another of its waiting threads, and let a thread that
-- begins to wait take the place of one so served, without telling Redis (holders and places stay
-- the process'; no other process waits behind them). Its waiters being the whole queue is checked
-- here, by the count per process in OWN; the process learns it from the reply ("sole"), and the
-- first waiter of another process to queue after that tells it to stop ("f<kind>:<ticket>" on its
-- wake list), so the newcomer waits behind the threads that were waiting when it came, not behind
-- those that come after it. One push per change of owner, O(1) per call.
-- With classes or weights the owner is the process and the waiter's shape (owner_of): a waiter of
-- another class or weight, of the same process too, ends it like a foreign one.
local owner = K.owner_of(id)
local mine = redis.call('HINCRBY', S.OWN, owner, 1)
if mine == 1 then
    expire_new(S, S.OWN)
end
own_add(S, 'w', K.share_member(id), 1)
local sole = K.end_sole(S, owner)
local qlen = redis.call('ZCARD', S.Q)
-- Not while the operator drains the pool or holds it below what is held now: the permits must
-- come back to Redis for that (admin.lua ends it for those already alone).
local alone = mine == qlen and not drained and (not override or holders <= override)
-- A client of an older version may take a waiter out counting it under another owner (a grouped
-- waiter under its whole cid), so an owner's count can drift above its waiters and equal the
-- queue's length while someone else waits. Every count in OWN is at least 1 (a field is deleted
-- at 0), so the counts add up to the queue's length with this owner's alone only when OWN has no
-- other owner: when it has one, they drifted, and are rebuilt from the queue (O(queue), once per
-- drift). (HLEN, not HGETALL: the workers' documented ACL has the one, not the other.)
if alone and redis.call('HLEN', S.OWN) ~= (sole and 2 or 1) then
    alone = false
    redis.call('DEL', S.OWN, own_key(S, 'w'))
    for _, queued_id in ipairs(redis.call('ZRANGE', S.Q, 0, -1)) do
        local o = K.owner_of(queued_id)
        if o then
            redis.call('HINCRBY', S.OWN, o, 1)
            own_add(S, 'w', K.share_member(queued_id), 1)
        end
    end
    expire_new(S, S.OWN)
    sole = false
end
if alone and sole ~= owner then
    redis.call('HSET', S.OWN, '*', owner)
elseif not alone and sole == owner then
    redis.call('HDEL', S.OWN, '*')
end
-- Shares (docs/design.md, "Shares"): an owner whose share fell below what it holds is told.
if not d then
    K.tell_shares(S, L)
end
touch(S, fresh)
return answer{status = GRANT.QUEUED, holders = holders, queue = qlen, ticket = ticket,
    sole = alone and 1 or 0, quarantine = q, why = S.why}
