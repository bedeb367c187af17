-- _common.lua: prepended at build time to every dbthrottle script (see tools/embed-lua.sh).
--
-- One semaphore = one pool and one kind (q = queries, c = connections). Its keys share the hash
-- tag {pool}, so a Redis Cluster keeps them in one slot:
--   KEYS[1] holders  ZSET  permit id -> lease expiry (ms, Redis clock)
--   KEYS[2] queue    ZSET  waiter id -> ticket (FIFO order)
--   KEYS[3] wexp     ZSET  waiter id -> lease expiry (ms, Redis clock)
--   KEYS[4] seq      STRING ticket counter
--   KEYS[5] seen     STRING the limit the last acquirer configured (to report disagreement)
--   KEYS[6] info     HASH   holder or waiter id -> "<since ms> <host> <pid> <conn>": since = when
--                           it was granted (holder) or queued (waiter), for dbthrottle status
--   KEYS[7] stats    HASH   counters: grants, queued, refused, cancelled, expired, evicted, wait_ms
--   KEYS[8] limit    STRING the operator's override of the limit (dbthrottle limit); no TTL
--   KEYS[9] drain    STRING present while the operator drains the pool: no grants; no TTL
--   KEYS[10] owners  HASH   cid -> how many waiters of that process are queued; field '*' -> the
--                           cid whose waiters were the whole queue when it last queued one (the
--                           process may then pass permits between its own threads: see queued())
--   KEYS[11] era     STRING "<token> <quarantine until ms> <why>": the server (run_id) the state
--                           belongs to, and until when no grant is made (see era()); 7 days TTL
--   KEYS[12] gone    ZSET   id -> when it is forgotten: ids that left the holders lawfully of
--                           late (reaped as expired, released, cancelled), so that a renewal of
--                           one that is missing and NOT among them proves data was lost
-- ARGV[1] wake prefix: "<prefix>{pool}:wake:"; a grant for id "<cid>.<n>.<limit>" is pushed
--         to the list wake prefix .. cid, on which that process' listener blocks (BLPOP)
-- ARGV[2] kind ("q" or "c"), ARGV[3] the caller's lease (ms), ARGV[4] key TTL (ms)
-- ARGV[5..9] the era (docs/design.md, "Failover and data loss"): the run_id of the server the
--         caller's connection reached ("" when INFO was refused: no era check), when that server
--         started (ms, its clock), Q (ms: how long a quarantine lasts, the longest a live holder
--         takes to re-assert), the adopt token (a cluster slot migrated whole from that server:
--         its state is the same, no quarantine; "" none), and the run_id the caller's process
--         last saw for the pool ("" none: a process new to the pool)
-- A script's own arguments start at ARGV[10].
-- Ids are made by the client: "<cid>.<serial>.<limit>", cid = 16 hex digits per process.
-- A dry run (dbthrottle check and run, before a worker starts; cli/preflight.c): the command loads
-- each script with the next line changed to `local DRY_RUN = true`, and calls it on the pool's
-- keys as a worker would. Every command is first checked against the caller's ACL
-- (redis.acl_check_cmd, Redis 7) with the keys and arguments it would have; then reads run, and
-- every other command answers as if it had done its work (so the script goes on to the commands
-- after it): nothing changes, and a command the user may not run fails with NOPERM, naming the
-- command and its key.
local DRY_RUN = false
local redis = redis
if DRY_RUN then
    local real = redis
    local READS = {
        GET = true, MGET = true, PTTL = true, TIME = true, HGET = true, HLEN = true,
        HGETALL = true, ZCARD = true, ZCOUNT = true, ZRANGE = true, ZRANGEBYSCORE = true,
        ZSCORE = true,
    }
    -- What a write answers had it run: enough for the script to take its longer paths (a member
    -- removed, a counter or a field new).
    local function pretend(cmd, ...)
        local args = {...}
        if cmd == 'HINCRBY' or cmd == 'INCRBY' then
            return tonumber(args[3] or args[2]) or 1
        elseif cmd == 'ZREM' or cmd == 'HDEL' or cmd == 'DEL' then
            return #args - ((cmd == 'DEL') and 0 or 1)
        elseif cmd == 'SET' then
            return {ok = 'OK'}
        end
        return 1
    end
    local function dry_call(cmd, ...)
        local c = string.upper(cmd)
        -- checked first, reads too: Redis' own refusal inside a script does not name the command
        if not real.acl_check_cmd(cmd, ...) then
            error({err = 'NOPERM dry run: this user may not run ' .. c .. ' on ' ..
                tostring((...)) .. ' (see the Redis ACLs in docs/operations.md)'})
        end
        if READS[c] then
            return real.call(cmd, ...)
        end
        return pretend(c, ...)
    end
    redis = setmetatable({call = dry_call}, {__index = real})
end
local NK = 15 -- keys per semaphore
local WAKE = ARGV[1]
local LEASE, TTL = tonumber(ARGV[3]), tonumber(ARGV[4])
local TOKEN, STARTED, QMS = ARGV[5] or '', tonumber(ARGV[6]) or 0, tonumber(ARGV[7]) or 0
local ADOPT, PREV = ARGV[8] or '', ARGV[9] or ''
local ERA_TTL = 7 * 24 * 3600 * 1000 -- outlives idleness, not forever

-- One semaphore: its keys, the NK from KEYS[base + 1] in the order above, and its kind letter.
-- Every helper below takes the semaphore it works on, so that a script over both kinds
-- (renew.lua, status.lua) says which one each call is about.
local function semaphore(base, kind)
    return {
        H = KEYS[base + 1], Q = KEYS[base + 2], W = KEYS[base + 3], SEQ = KEYS[base + 4],
        SEEN = KEYS[base + 5], INFO = KEYS[base + 6], STATS = KEYS[base + 7], LIM = KEYS[base + 8],
        DRAIN = KEYS[base + 9], OWN = KEYS[base + 10], ERA = KEYS[base + 11],
        GONE = KEYS[base + 12], CLASSES = KEYS[base + 13], CLASSES_SEEN = KEYS[base + 14],
        TAGS = KEYS[base + 15], kind = kind,
    }
end

-- The semaphore of a script that works on one: KEYS[1..NK], of kind ARGV[2].
local S = semaphore(0, ARGV[2])

-- The TTL a new key gets: ours, or SEEN's remaining one if longer. So SEEN always expires first
-- and touch() may judge every key by SEEN alone, whatever leases the clients of a pool use.
local function floor_ttl(s)
    local st = redis.call('PTTL', s.SEEN)
    if st > TTL then
        return st
    end
    return TTL
end

-- A key that may have just been created: give it a TTL unless it has one (Redis 7: NX).
local function expire_new(s, k)
    redis.call('PEXPIRE', k, floor_ttl(s), 'NX')
end

-- The limit a waiter configured travels in its id, so whoever releases grants by the waiter's own
-- limit: a caller is never admitted beyond what it configured.
local function limit_of(id)
    return tonumber(string.match(id, '%.(%d+)$')) or 1
end


-- Counters for dbthrottle status, in STATS (which expires with the pool's other keys).
local function count(s, field, n)
    n = n or 1
    if redis.call('HINCRBY', s.STATS, field, n) == n then -- the field (maybe the key) is new
        expire_new(s, s.STATS)
    end
end

-- Records who holds or waits, and since when (now).
local function note_who(s, id, now, who)
    if redis.call('HSET', s.INFO, id, now .. ' ' .. who) == 1 and redis.call('HLEN', s.INFO) == 1 then
        expire_new(s, s.INFO) -- the key is new
    end
end

-- ---- Eras and quarantine (docs/design.md, "Failover and data loss") ----
-- Redis' holders may lack permits that processes still hold and use: after a failover (the new
-- primary lacks the last writes), a restart (without persistence: everything), keys deleted by
-- hand. Redis would grant them again. So each semaphore remembers the server its state belongs
-- to (ERA); when a call finds another server, or the state missing on a server that started
-- while beliefs from before may live, the semaphore enters a quarantine: no grant until every
-- live holder has had the time (Q) to re-assert its permits by renewing (renew.lua).

-- Starts (or lengthens) a quarantine of Q from now: until then no grant is made.
local function quarantine(s, now, why)
    local till = now + QMS
    if s.qleft and s.qleft > 0 and now + s.qleft > till then
        till = now + s.qleft
    end
    redis.call('SET', s.ERA, TOKEN .. ' ' .. till .. ' ' .. why, 'PX', ERA_TTL)
    count(s, 'quarantines')
    s.qleft, s.why = till - now, why
end

-- What ERA (its value raw, or false) says of semaphore s now: how long its quarantine still lasts
-- (ms; 0 = none), after starting one if the state is not the caller's server's. Sets s.qleft and
-- s.why ("changed": another server, or a restart; "restarted": the state is missing on a server
-- that just started or the caller knew on another; "lost": a holder was missing, see renew.lua).
local function era(s, raw, now)
    s.qleft, s.why = 0, false
    local tok, till, why
    if TOKEN == '' then
        -- INFO refused: this caller cannot tell servers apart (the client warns
        -- redis_unverified), but a quarantine another caller started holds for it too
        if raw then
            tok, till, why = string.match(raw, '^(%S+) (%d+) (%S+)$')
            till = tonumber(till) or 0
            if till > now then
                s.qleft, s.why = math.min(till - now, LEASE + QMS), why
            end
        end
        return s.qleft
    end
    if raw then
        tok, till, why = string.match(raw, '^(%S+) (%d+) (%S+)$')
        till = tonumber(till) or 0
        if tok == TOKEN then
            if till > now then
                s.qleft, s.why = till - now, why
            end
            return s.qleft
        end
        -- A quarantine running when the state moved is carried over, but never beyond what one
        -- could last (another server's clock may be ahead).
        if till > now + LEASE + QMS then
            till = now + LEASE + QMS
        end
        if ADOPT ~= '' and tok == ADOPT then
            -- the whole state moved with its server's token (a cluster slot migrated): the same
            -- state, no quarantine; the era becomes this server's
            redis.call('SET', s.ERA, TOKEN .. ' ' .. till .. ' ' .. (why or '-'), 'PX', ERA_TTL)
            if till > now then
                s.qleft, s.why = till - now, why
            end
            return s.qleft
        end
        s.qleft = till > now and till - now or 0
        quarantine(s, now, 'changed')
        return s.qleft
    end
    -- Missing: a new pool, a pool idle for 7 days, or the state lost. Beliefs from before can
    -- only live in a process that knew the pool on another server (or before this one's restart):
    -- a process new to the pool, on a pool new to this server, is not made to wait. (PREV is the
    -- pool's, both kinds': a process's first use of the other kind finds that one's era missing,
    -- which is no loss. So a deletion on the same server (FLUSHALL) is left to the evidence rule:
    -- the survivors' next renewal, see renew.lua.)
    if PREV ~= '' and PREV ~= TOKEN then
        quarantine(s, now, (now < STARTED + LEASE + QMS) and 'restarted' or 'changed')
        return s.qleft
    end
    redis.call('SET', s.ERA, TOKEN .. ' 0 -', 'PX', ERA_TTL)
    return 0
end

-- The operator's controls of s (the limit override, nil when none; whether grants are stopped)
-- and its quarantine (ms left, 0 = none), read once per call: one MGET.
local function controls(s, now)
    if s.drained == nil then
        local c = redis.call('MGET', s.LIM, s.DRAIN, s.ERA)
        s.override, s.drained = tonumber(c[1]) or false, c[2] ~= false
        era(s, c[3], now)
    end
    return s.override or nil, s.drained, s.qleft
end

-- The operator's controls alone, without the era (a call that grants nothing need not start
-- the era of a pool it only looks at).
local function operator_controls(s)
    if s.drained == nil then
        local c = redis.call('MGET', s.LIM, s.DRAIN)
        return tonumber(c[1]), c[2] ~= false
    end
    return s.override or nil, s.drained
end

-- Id left the holders (or the queue) lawfully: remembered until `forget` (ms), so that a renewal
-- of it that races its leaving is not taken for data lost.
local function note_gone(s, now, ids, forget)
    if TOKEN == '' or #ids == 0 then
        return
    end
    local args = {}
    for _, id in ipairs(ids) do
        args[#args + 1] = forget
        args[#args + 1] = id
    end
    -- Forget as many ids past their time as are added, and a few more: the set never holds more
    -- than the ids of its window (a release's Q), however fast permits come and go, even when no
    -- renewal trims it (a busy process renews every lease/3; it may release thousands meanwhile).
    local old = redis.call('ZRANGEBYSCORE', s.GONE, '-inf', now, 'LIMIT', 0, #ids + 8)
    if #old > 0 then
        redis.call('ZREM', s.GONE, unpack(old))
    end
    redis.call('ZADD', s.GONE, unpack(args))
    redis.call('PEXPIRE', s.GONE, 2 * LEASE + QMS)
end

-- The process ("cid") an id belongs to.
local function cid_of(id)
    return string.match(id, '^[^.]+')
end

-- Pushes msg to the wake list of process cid, on which its listener blocks (BLPOP); the list
-- lives TTL ms after its last push.
local function wake(cid, msg)
    local wk = WAKE .. cid
    redis.call('RPUSH', wk, msg)
    redis.call('PEXPIRE', wk, TTL)
end

-- One waiter of id's process left the queue (granted, withdrawn, expired). Once the queue is
-- empty the counts start over: a client of an older version, which removes waiters without
-- counting, can only make them drift until then.
local function unqueued(s, id)
    local c = cid_of(id)
    if c and redis.call('HINCRBY', s.OWN, c, -1) <= 0 then
        redis.call('HDEL', s.OWN, c)
    end
    if redis.call('ZCARD', s.Q) == 0 then
        redis.call('DEL', s.OWN)
    end
end

-- Tells the process whose waiters were the whole queue (OWN['*']), if any, to stop passing
-- permits between its threads (local handover, see acquire.lua): "f<kind>:<ticket>" on its wake
-- list, the ticket ordering the message against the replies to its own acquires. Unless `except`
-- is that process.
local function end_sole(s, except)
    local sole = redis.call('HGET', s.OWN, '*')
    if not sole or sole == except then
        return sole
    end
    wake(sole, 'f' .. s.kind .. ':' .. redis.call('INCR', s.SEQ))
    redis.call('HDEL', s.OWN, '*')
    expire_new(s, s.SEQ)
    return false
end

-- Expired entries are removed a bounded batch per call; each is removed once. Until then they
-- count as holders, which can only under-admit.
local REAP_BATCH = 64

local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function reap(s, now)
    local dead = redis.call('ZRANGEBYSCORE', s.H, '-inf', now, 'LIMIT', 0, REAP_BATCH)
    if #dead > 0 then
        redis.call('ZREM', s.H, unpack(dead))
        redis.call('HDEL', s.INFO, unpack(dead))
        count(s, 'expired', #dead)
        -- expired, not lost: its process stops renewing within a lease (two, to be sure)
        note_gone(s, now, dead, now + 2 * LEASE)
    end
    local gone = redis.call('ZRANGEBYSCORE', s.W, '-inf', now, 'LIMIT', 0, REAP_BATCH)
    if #gone > 0 then
        redis.call('ZREM', s.W, unpack(gone))
        note_gone(s, now, gone, now + 2 * LEASE)
        for _, id in ipairs(gone) do
            if redis.call('ZREM', s.Q, id) == 1 then
                unqueued(s, id)
            end
        end
        redis.call('HDEL', s.INFO, unpack(gone))
    end
    return #dead
end

-- Grants the head of the queue while it fits under its own limit. A grant moves the waiter to
-- the holders with the lease its process last renewed (a dead waiter's grant expires with it),
-- and pushes "g<kind>:<id>" to its process' wake list.
local function pump(s, now)
    local granted = 0
    local head = redis.call('ZRANGE', s.Q, 0, 0)[1]
    if not head then
        return 0 -- the common case: nobody waits, and the controls need not be read
    end
    local override, drained, q = controls(s, now)
    if drained or q > 0 then
        return 0 -- in quarantine no grant is made
    end
    while head do
        local nh = redis.call('ZCARD', s.H)
        if nh >= (override or limit_of(head)) then
            break
        end
        local exp = tonumber(redis.call('ZSCORE', s.W, head)) or (now + LEASE)
        redis.call('ZREM', s.Q, head)
        redis.call('ZREM', s.W, head)
        unqueued(s, head)
        redis.call('ZADD', s.H, exp, head)
        if nh == 0 then
            expire_new(s, s.H) -- the key is new
        end
        -- the wait ends now: count it, and the holder's "since" becomes the grant
        local info = redis.call('HGET', s.INFO, head)
        if info then
            local since, who = string.match(info, '^(%d+) (.*)$')
            if since then
                count(s, 'wait_ms', math.max(0, now - tonumber(since)))
                note_who(s, head, now, who)
            end
        end
        count(s, 'grants')
        wake(string.match(head, '^[^.]+'), 'g' .. s.kind .. ':' .. head)
        granted = granted + 1
        head = redis.call('ZRANGE', s.Q, 0, 0)[1]
    end
    return granted
end

-- Keys live TTL ms after the last call that touched them; a TTL is only ever extended, so a
-- client with a short lease cannot expire the keys under a client with a long one. The keys are
-- refreshed together once half of SEEN's TTL has passed, so most calls pay one PTTL; a key
-- created in between gets its TTL where it is created (expire_new), never shorter than SEEN's.
local function touch(s, force)
    local t = redis.call('PTTL', s.SEEN)
    if not force and t ~= -2 and t >= TTL / 2 then
        return
    end
    for _, k in ipairs({s.H, s.Q, s.W, s.SEQ, s.SEEN, s.INFO, s.STATS, s.OWN}) do
        local kt = redis.call('PTTL', k)
        if kt ~= -2 and kt < TTL then
            redis.call('PEXPIRE', k, TTL)
        end
    end
    redis.call('PEXPIRE', s.ERA, ERA_TTL)
end


-- Class definitions (docs/design.md, "Classes"), one string per semaphore:
-- "aging=<ms>;default=<name>;<name>:<share>:<priority>:<wait ms or ->:<cap or ->;...".
-- Returns {aging, default, list = {{name, share, priority, wait, cap}...}}, or nil for none.
local function parse_classes(text)
    if not text or text == '' then
        return nil
    end
    local d = {aging = 0, default = '', list = {}}
    for part in string.gmatch(text, '[^;]+') do
        local aging = string.match(part, '^aging=(%d+)$')
        local dflt = string.match(part, '^default=(.*)$')
        if aging then
            d.aging = tonumber(aging)
        elseif dflt then
            d.default = dflt
        else
            local n, sh, pr, w, c = string.match(part,
                '^([a-z0-9_-]+):(%d+):(-?%d+):([%d-]+):([%d-]+)$')
            if n then
                d.list[#d.list + 1] = {name = n, share = tonumber(sh), priority = tonumber(pr),
                    wait = w, cap = c}
            end
        end
    end
    return d
end

local function format_classes(d)
    local parts = {'aging=' .. d.aging, 'default=' .. d.default}
    for _, c in ipairs(d.list) do
        parts[#parts + 1] = table.concat({c.name, c.share, c.priority, c.wait, c.cap}, ':')
    end
    return table.concat(parts, ';')
end

-- The definitions in force: the operator's, else those a worker shipped; and whether shipped.
local function effective_classes(s)
    local t = redis.call('GET', s.CLASSES)
    if t then
        return parse_classes(t), false
    end
    return parse_classes(redis.call('GET', s.CLASSES_SEEN)), true
end

-- A dry run also checks the wake lists, which a script writes only when it grants or asks for kept
-- permits back: an idle pool's dry run would not reach those pushes.
if DRY_RUN and WAKE and TTL then
    redis.call('RPUSH', WAKE .. '0000000000000000', 'x')
    redis.call('PEXPIRE', WAKE .. '0000000000000000', TTL)
end
