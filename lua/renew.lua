-- renew.lua: extend the leases of one process' holders and waiters of both kinds of a pool in
-- one call, and keep the queues live (an expired holder is reaped and its permit granted even
-- when nobody releases). KEYS[1..NK] the query semaphore, KEYS[NK+1..2NK] the connection one.
-- ARG: the four counts (lua/protocol/renew.def): query holders, query waiters, connection
-- holders, connection waiters; then the ids in that order; then, optionally, for each kind what
-- the process did without Redis since its last renewal (local handover): grants, queued, wait_ms,
-- added to the counters.
-- Its reply (lua/protocol/renew.def): the lost holders ("e:ID" or "x:ID" for one evicted by hand,
-- see admin.lua), lost waiters, granted waiters, the queue length of each kind, whether local
-- handover may go on, per kind (not while drained or over the operator's limit), the quarantine
-- ms left and why per kind, the ids re-asserted or re-queued per kind, the sole owner per kind
-- (OWN['*']: the process or host group whose waiters were the whole queue when it last queued
-- one), or false, and now (ms, Redis' clock: the caller reads Redis' clock from it, see
-- BELIEVED_UNTIL): ids Redis no longer has (expired), whose
-- owners must not believe they hold or wait any more; waiters Redis already granted, so a grant
-- whose pushed message went astray still reaches its owner; and whether anybody waits, so that a
-- process keeping permits between commands gives them back even if the push that says so went
-- astray (a connection lost with the popped message, a Redis restored from a snapshot).
-- Re-assertion (docs/design.md, "Failover and data loss"): during a quarantine, a holder Redis
-- lacks is added back with a fresh lease (it counts against the limit when grants resume), and a
-- waiter Redis lacks is queued again at the end of the queue; outside one, a holder or waiter
-- that is missing although it neither expired nor left lately (GONE) nor was evicted proves that
-- data was lost: the semaphore enters a quarantine, and the id is re-asserted. Unless the renewal
-- runs after the time its process stated it may still believe in the leases it names (see
-- BELIEVED_UNTIL): its leases ran out meanwhile, and an id missing then is an expiry (Redis
-- stopped with the renewal in its socket for longer than the keys' TTL, which expired them all),
-- not a loss.
-- The arguments after the common ones (lua/protocol/renew.def): the four counts (ARG), then the
-- groups (GROUP, read with group_arg): the ids, the local counts, the record, the doings, the
-- local waits, until, the local holds.
load_classes() -- renew_units
local now = now_ms()
local exp = now + LEASE
local lost_h, lost_w, granted_w = {}, {}, {}
local at = 0 -- the ids read so far
local nids = GROUP.ids.n
-- After the record (GROUP.doing), what each held id does now, one argument per held id in the order of the
-- held ids (the query kind's, then the connection kind's): "<letter>\31<session>", the letter
-- r(unning a command), i(dle in a transaction), k(ept between commands) or '-' (unchanged), the
-- session "" when the process has none to give (else its four fields, "<backend pid>\31<app>\31
-- <user>\31<database>"); then, optionally, "\31<host> <pid> <conn>": who holds it now (a permit
-- passed from another process of the host or connection of the process), written over the info's
-- who when it differs; then, optionally, "\31<ms>": how long that holder has held it, which makes
-- the info's since when it differs (HELD is the named holder's, not the permit's age since its
-- first grant). So 2 or 5 fields without who, 3 or 6 with it, 4 or 7 with the age. Absent: nothing
-- to update.
local STATE_OF = {[DOING.RUNNING] = 'running', [DOING.IDLE_TX] = 'idle_tx', [DOING.KEPT] = 'kept'}
-- After those (GROUP.waits), per kind, the waits local handover granted without Redis since the
-- last renewal, for the wait histogram: "<tag> <sum ms> <i>:<n> ...", ';' between tags ("."
-- untagged). And last (GROUP.holds), in the same form, the holds that ended in a pass without
-- Redis, for the hold histogram (a release says its own hold: release.lua).
-- After those (GROUP.believed), optionally: until when (ms, Redis' clock) the process may still believe in any lease
-- this renewal names (its last accepted renewal's send + a lease, carried to Redis' clock by its
-- reading of it, rounded up; then it takes them for lost). "" or absent: not said (an older
-- client, or one that has no reading of this server's clock). A renewal that runs later than that
-- ran late (Redis stopped, or the network held it), and whatever happened to Redis' data, its
-- process no longer uses the leases it names: an id of it that Redis lacks ran out, as any lease
-- Redis reaps (lost, and remembered in GONE), and starts no quarantine.
local BELIEVED_UNTIL = tonumber(group_arg(GROUP.believed, 0, 'until') or '')
local ran_late = BELIEVED_UNTIL ~= nil and now > BELIEVED_UNTIL
-- Adds a process' local histogram (the text of GROUP.waits or GROUP.holds) to series ('w' or 'h').
local function local_hist(s, text, series)
    local operator, shipped = defs_text(s.CLASSES), defs_text(s.CLASSES_SEEN)
    local d = (operator or shipped) and K.effective_defs(operator, shipped)
    for tag, sum, buckets in string.gmatch(text, '([^ ;]+) (%d+)([^;]*)') do
        local klass = d and K.class_of(d, (tag ~= '.') and tag or nil).name or ''
        for i, n in string.gmatch(buckets, ' (%d+):(%d+)') do
            n = tonumber(n)
            if redis.call('HINCRBY', s.HIST, series .. ':' .. i .. ':' .. klass, n) == n then
                redis.call('PEXPIRE', s.HIST, COUNTER_TTL, 'NX')
            end
        end
        if tonumber(sum) > 0 then
            redis.call('HINCRBY', s.HIST, series .. ':s:' .. klass, sum)
        end
    end
end
local held_before = 0 -- the held ids of the kinds before this one (their doing args come first)
-- Rewrites id's info only when what its process says it does differs from what is there: its
-- state, its session (a local handover passed the permit to another connection), or who holds it
-- (a permit passed to another process of the host).
local function note_doing(s, id, doing)
    if not doing then
        return
    end
    local f = {}
    for field in string.gmatch(doing .. US, '([^\31]*)\31') do
        f[#f + 1] = field
    end
    local letter, session, who, age = f[1], f[2] or '', nil, nil
    if #f >= 5 then
        session = table.concat(f, US, 2, 5)
        who, age = f[6], f[7]
    else
        who, age = f[3], f[4]
    end
    if #f < 2 or #letter ~= 1 then
        return
    end
    local info = redis.call('HGET', s.INFO, id)
    local head, state, klass, rest = string.match(info or '', '^([^\31]*)\31([^\31]*)\31([^\31]*)(.*)$')
    if not head then
        return
    end
    local new_head = head
    if who and who ~= '' then
        local since = string.match(head, '^%S*')
        age = tonumber(age or '')
        if age and string.sub(head, #since + 2) ~= who then
            since = tostring(math.max(0, now - age)) -- another holder: its own time
        end
        new_head = since .. ' ' .. who
    end
    local new_state = STATE_OF[letter] or state
    local new_rest = (session ~= '') and (US .. session) or rest
    if new_head ~= head or new_state ~= state or new_rest ~= rest then
        redis.call('HSET', s.INFO, id, new_head .. US .. new_state .. US .. klass .. new_rest)
    end
end
-- Who re-asserts, for dbthrottle status: the host and pid of the process' record, if it came.
local function reasserter()
    local rec = group_arg(GROUP.record, 0, 'record')
    local host, pid = string.match(rec or '', '^' .. RECORD.VERSION ..
        '\t([^\t]*)\t[^\t]*\t[^\t]*\t[^\t]*\t[^\t]*\t[^\t]*\t(%d+)')
    return (host or '?') .. ' ' .. (pid or '?') .. ' -'
end
-- Whether id left lawfully of late, so that its renewal must not bring it back. Not asked during a
-- quarantine a change of server started: GONE then holds what the state's other history reaped (a
-- lagging replica's own clock expired leases its master had renewed since), which says nothing of
-- the process' belief, and the process names only permits renewed within a lease. (A release
-- racing its renewal there leaves a phantom holder for one lease at most: under-admission.)
local function left_lately(s, id)
    if s.qleft > 0 and s.why ~= WHY.LOST then
        return false
    end
    return redis.call('ZSCORE', s.GONE, id) ~= false
end
-- Ids a renewal that ran late named and Redis lacks: their leases ran out (see BELIEVED_UNTIL).
-- Remembered in GONE for two leases as reap does (so that the renewals sent after it in the stall
-- find them there), and those no call had reaped (the keys that held them expired) are counted.
-- Whether a lease that ends at score (ms, Redis' clock; false: none) ran out before this call
-- ran. Its process then believes in it no more: its belief rests on the send time of a renewal
-- Redis accepted, never later than the score that renewal set, so by its own clock it has given
-- the lease up (the margin covers clock rates, 1000 ppm of a lease, and 2 ms). Such a lease is
-- expired whatever the call says, never renewed back to life: a renewal that waited in a stopped
-- Redis' socket would otherwise revive a permit nobody uses, for a lease. A lease a later
-- renewal extended (one on another connection that overtook this one) has a later score, and is
-- renewed as usual. A score may now run past what its process believes (renewals never end a
-- lease sooner: renew_flags), so a renewal delayed past the belief may still extend a permit
-- nobody uses, for a lease: capacity held for nobody, never a second holder.
-- Not during a quarantine a change of server started: the scores are then another server's
-- clock's (a promoted replica's may run ahead), and what the process believes is re-asserted, as
-- left_lately says.
local function lapsed(s, score)
    if s.qleft > 0 and s.why ~= WHY.LOST then
        return false
    end
    return score and tonumber(score) + 2 + LEASE / 1000 < now
end
local function ran_out(s, ids, holders)
    if #ids == 0 or TOKEN == '' then
        return
    end
    local fresh = {}
    for _, id in ipairs(ids) do
        if not redis.call('ZSCORE', s.GONE, id) then
            fresh[#fresh + 1] = id
        end
    end
    if #fresh > 0 then
        note_gone(s, now, fresh, now + 2 * LEASE)
        if holders then
            count(s, 'expired', #fresh)
        end
    end
end
-- EVICTED.PLAIN or .CANCEL when the operator evicted id within two leases (admin.lua's marker in
-- GONE), else nil.
local function evicted_mark(s, id)
    for _, mark in ipairs({EVICTED.PLAIN, EVICTED.CANCEL}) do
        local till = redis.call('ZSCORE', s.GONE, mark .. ':' .. id)
        if till and tonumber(till) > now then
            return mark
        end
    end
    return nil
end
local function renew_holders(s, n)
    local back = 0
    local late = {}
    for i = at, at + n - 1 do
        local id = group_arg(GROUP.ids, i, 'id')
        local score = redis.call('ZSCORE', s.H, id)
        if lapsed(s, score) then
            -- its lease ran out before this call ran (a renewal delayed past it, in a stopped
            -- Redis' socket): expired, as a reap would find it, not renewed back to life (its
            -- process gives it up by its own clock; renewed, it was a permit nobody used for a
            -- lease)
            if unhold(s, id) == 1 then
                observe_hold(s, redis.call('HGET', s.INFO, id), now)
            end
            redis.call('HDEL', s.INFO, id)
            lost_h[#lost_h + 1] = id
            late[#late + 1] = id
        elseif score then
            K.renew_units(s, id, exp, score)
            note_doing(s, id, group_arg(GROUP.doing, held_before + i - at, 'doing'))
        else
            -- "e:ID" / "x:ID" when the operator evicted it (and asked for its command's cancel)
            local ev = redis.call('HGET', s.INFO, 'evicted:' .. id)
            if ev then
                redis.call('HDEL', s.INFO, 'evicted:' .. id)
            else
                -- every renewal naming it within two leases (see admin.lua): the giver's and the
                -- receiver's of a permit passed between processes
                ev = evicted_mark(s, id)
            end
            if ev then
                lost_h[#lost_h + 1] = ev .. ':' .. id
            elseif ran_late then
                lost_h[#lost_h + 1] = id -- its lease ran out: not evidence of loss
                late[#late + 1] = id
            elseif TOKEN ~= '' and not left_lately(s, id) then
                if s.qleft == 0 then
                    K.quarantine(s, now, WHY.LOST) -- neither expired nor given back: data was lost
                end
                -- all its units, as many as a grant at its limit gives
                hold(s, id, (units_at(id, s.override or K.limit_of(id))), exp)
                note_who(s, id, now, reasserter())
                note_doing(s, id, group_arg(GROUP.doing, held_before + i - at, 'doing'))
                back = back + 1
            else
                lost_h[#lost_h + 1] = id
            end
        end
    end
    if back > 0 then
        expire_new(s, s.H)
        count(s, 'reasserted', back)
    end
    ran_out(s, late, true)
    at = at + n
    held_before = held_before + n
    return back
end
local function renew_waiters(s, n)
    local back = 0
    local late = {}
    for i = at, at + n - 1 do
        local id = group_arg(GROUP.ids, i, 'id')
        local place = redis.call('ZSCORE', s.W, id)
        local queued_now = place and redis.call('ZSCORE', s.Q, id)
        local held = not queued_now and redis.call('ZSCORE', s.H, id)
        if (queued_now and lapsed(s, place)) or lapsed(s, held) then
            -- its place's lease ran out before this call ran: gone, as a reap would find it (a
            -- place renewed back to life would be granted a permit nobody takes for a lease)
            if queued_now then
                load_classes()
                redis.call('ZREM', s.W, id)
                redis.call('ZREM', s.Q, id)
                K.unqueued(s, id)
                redis.call('ZREM', K.tag_queue(s, shape_of(id) or '-'), id)
            elseif unhold(s, id) == 1 then
                observe_hold(s, redis.call('HGET', s.INFO, id), now)
            end
            redis.call('HDEL', s.INFO, id)
            lost_w[#lost_w + 1] = id
            late[#late + 1] = id
        elseif queued_now then
            if renew_flags(place, now) == 'XX' then -- (see renew_flags)
                redis.call('ZADD', s.W, 'XX', exp, id)
            else
                redis.call('ZADD', s.W, 'XX', 'GT', exp, id)
            end
        elseif held then
            -- granted (the grant is on its way, or was lost): renew it as a holder, and say so
            K.renew_units(s, id, exp, held)
            granted_w[#granted_w + 1] = id
        elseif ran_late then
            lost_w[#lost_w + 1] = id -- its place's lease ran out: not evidence of loss
            late[#late + 1] = id
        elseif TOKEN ~= '' and not left_lately(s, id) then
            -- its place was lost with the state (it neither expired nor left): queued again, at
            -- the end, and no grant until the holders have re-asserted theirs
            if s.qleft == 0 then
                K.quarantine(s, now, WHY.LOST)
            end
            local ticket = redis.call('INCR', s.SEQ)
            redis.call('ZADD', s.Q, ticket, id)
            K.queue_tag(s, id, ticket)
            redis.call('ZADD', s.W, exp, id)
            local owner = K.owner_of(id)
            if owner and redis.call('HINCRBY', s.OWN, owner, 1) == 1 then
                expire_new(s, s.OWN)
            end
            own_add(s, 'w', K.share_member(id), 1)
            K.end_sole(s, owner)
            note_who(s, id, now, reasserter())
            for _, k in ipairs({s.SEQ, s.Q, s.W}) do
                expire_new(s, k)
            end
            back = back + 1
        else
            lost_w[#lost_w + 1] = id
        end
    end
    if back > 0 then
        count(s, 'requeued', back)
    end
    ran_out(s, late, false)
    at = at + n
    return back
end
local queued, allowed, quarantined, why, back, sole = {}, {}, {}, {}, {}, {}
local share, holding = {}, {}
for k = 0, NKINDS - 1 do
    local s = semaphore(NK * k, KIND_LETTER[k])
    local nh, nw = ARG.held_q, ARG.queued_q
    if k == 1 then
        nh, nw = ARG.held_c, ARG.queued_c
    end
    s.qleft = 0
    if nh + nw > 0 then
        controls(s, now) -- the era first: it decides what a missing id means
    end
    back[k + 1] = renew_holders(s, nh) + renew_waiters(s, nw)
    for j, field in ipairs({'grants', 'queued', 'wait_ms'}) do
        local n = tonumber(group_arg(GROUP.counts, k, field)) or 0
        if n > 0 then
            count(s, field, n)
        end
    end
    local waits = group_arg(GROUP.waits, k, 'waits')
    if waits and waits ~= '' then
        local_hist(s, waits, 'w')
    end
    local holds = group_arg(GROUP.holds, k, 'holds')
    if holds and holds ~= '' then
        local_hist(s, holds, 'h')
    end
    reap(s, now)
    pump(s, now)
    -- A renewal of nothing (an idle process' heartbeat, which keeps its record) does not keep
    -- an idle pool's keys alive.
    if nids > 0 then
        touch(s)
    end
    if TOKEN ~= '' then
        -- forgotten a batch at a time (with the commands the documented ACLs allow)
        local old = redis.call('ZRANGEBYSCORE', s.GONE, '-inf', now, 'LIMIT', 0, REAP_BATCH)
        if #old > 0 then
            redis.call('ZREM', s.GONE, unpack(old))
        end
    end
    queued[k + 1] = redis.call('ZCARD', s.Q)
    -- whether local handover may go on: not while drained, nor while more is held than the limit
    -- (the operator's, else the one the process' first id carries). A re-assertion after a
    -- failover can leave more held than the limit (grants an old primary made after the new one
    -- took over, re-asserted on it), and every process passing its permits on locally would keep
    -- it there; given back through Redis, they are granted again only below it.
    local override, drained = K.operator_controls(s)
    local limit = override
    if not limit and nh + nw > 0 then
        load_classes()
        limit = K.limit_of(group_arg(GROUP.ids, at - nh - nw, 'id'))
    end
    local ok = not drained and (not limit or redis.call('ZCARD', s.H) <= limit)
    allowed[k + 1] = ok and 1 or 0
    quarantined[k + 1] = s.qleft or 0
    why[k + 1] = s.why or false
    -- whose waiters are the whole queue (a process sharing with its host learns whether it is its
    -- host: the queue's length alone cannot say, other processes' waiters being its host's)
    sole[k + 1] = redis.call('HGET', s.OWN, '*')
    -- the renewing owner's share and holding (docs/design.md, "Shares"): the host group of the
    -- first id it names of the kind with one in its cid (held, then queued; the client applies
    -- them only when that id is of its group now); share -1 while no share is in force for it (no
    -- classes, it waits, and another owner waits too), and -1 and 0 when it names no such id
    share[k + 1], holding[k + 1] = -1, 0
    local o
    for i = at - nh - nw, at - 1 do
        local id = group_arg(GROUP.ids, i, 'id')
        local c = id and K.cid_of(id)
        if c and string.find(c, '~', 1, true) then
            o = K.share_member(id)
            break
        end
    end
    if o then
        holding[k + 1] = K.held_by(s, o)
        local head = redis.call('ZRANGE', s.Q, 0, 0)[1]
        if head and not s.defs then
            local sh = K.shares(s, override or K.limit_of(head))
            local r = sh and #sh.rows > 1 and sh.by[o]
            if r then
                share[k + 1] = r.share
            end
        end
    end
end
-- The process record (dbthrottle status lists the processes of a pool): KEYS[2NK+1] a ZSET of
-- client id -> when its record expires, KEYS[2NK+2] a HASH of client id -> "<seen ms>\t<record>"
-- (the record's fields: script_protocol.h). GROUP.record: the client id, the record, how long it
-- lives (ms), and "1" when the process leaves (the record goes). Expired
-- records are removed a batch at a time; the two keys live as long as their longest record.
local PROCS, PINFO = KEYS[2 * NK + 1], KEYS[2 * NK + 2]
if PROCS and PINFO and group_arg(GROUP.record, 0, 'goodbye') then
    local cid, rttl = group_arg(GROUP.record, 0, 'cid'), tonumber(group_arg(GROUP.record, 0, 'ttl'))
    if group_arg(GROUP.record, 0, 'goodbye') == '1' then
        redis.call('ZREM', PROCS, cid)
        redis.call('HDEL', PINFO, cid, cid .. RECORD.CLIENTS_FIELD)
    else
        redis.call('ZADD', PROCS, now + rttl, cid)
        redis.call('HSET', PINFO, cid, now .. '\t' .. group_arg(GROUP.record, 0, 'record'))
        -- Its connections (dbthrottle clients), beside the record: status.lua reads the records
        -- only, so that the process table does not carry every process' connections.
        local clients = group_arg(GROUP.record, 0, 'clients') or ''
        if clients ~= '' then
            redis.call('HSET', PINFO, cid .. RECORD.CLIENTS_FIELD, clients)
        else
            redis.call('HDEL', PINFO, cid .. RECORD.CLIENTS_FIELD)
        end
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
        for i = 1, #gone do
            gone[i] = gone[i] .. RECORD.CLIENTS_FIELD
        end
        redis.call('HDEL', PINFO, unpack(gone))
    end
end
-- The pool's live settings (docs/design.md, "Live settings per pool"), beside the registry's keys
-- (the operator's, read undeclared as the limit is): their text when their version is not the
-- one the process applied ("" when there are none), else false: no bytes while nothing changes.
-- Read with pcall: a key of the wrong type, or a user that may not read it, must not fail the
-- renewal (the leases): the settings are then "unchanged". The version as C reads it (settings.c,
-- dbt_live_parse): "v" and 1 to 15 digits, then a newline or the end; any other text is version 0.
local live = false
local applied = tonumber(group_arg(GROUP.live, 0, 'version') or '')
if applied and PINFO then
    local text = redis.pcall('GET', string.sub(PINFO, 1, -#'procinfo' - 1) .. 'settings')
    if type(text) ~= 'table' then
        text = text or ''
        local d = string.match(text, '^v(%d+)\n') or string.match(text, '^v(%d+)$')
        local have = (d and #d <= 15) and tonumber(d) or 0
        if have ~= applied then
            live = text
        end
    end
end
return reply{lost_holders = lost_h, lost_waiters = lost_w, granted_waiters = granted_w,
    queue = queued, handover_allowed = allowed, quarantine = quarantined, why = why,
    reasserted = back, sole_owner = sole, now = now, share = share, held = holding, live = live}
