-- _common.lua: prepended at build time to every dbthrottle script (see tools/embed-lua.sh).
--
-- One semaphore = one pool and one kind (q = queries, c = connections). Its keys share the hash
-- tag {pool}, so a Redis Cluster keeps them in one slot:
--   the NK keys every script takes, KEYS[base + 1 ..], are those of lua/protocol/keys.def: their
--   order, their names here (s.H, s.Q, ...: semaphore() below) and what each holds
-- Per-tag keys (not declared: the same hash tag, so the same slot, like the wake lists):
--   <queue>:<tag>    ZSET   that tag's waiters, id -> ticket (a tagged id's, or any waiter's while
--                           classes are defined: untagged ones under the tag "-")
--   <holders>:<tag>  ZSET   that tag's held units, member -> lease expiry (tagged ids only: the
--                           untagged ones' units are ZCARD(holders) minus all the tagged ones)
-- The adaptive controller's record (not declared either: the same hash tag, the same slot):
--   <limit>:adapt    HASH   dbthrottle adapt's lease and last change (adapt.lua): owner (the
--                           leader's token "<host>:<pid>:<16 hex>", "" when it resigned), host,
--                           pid, lease_until (ms, Redis clock), since (when this owner took the
--                           lease), min, max, ttl_ms (the TTL it gives the limit key), interval_ms,
--                           window_ms, limit (the last it set), reason, changed_at (ms, Redis
--                           clock). 7 days TTL (COUNTER_TTL), so that status can say which
--                           controller last acted. The limit key itself WITH a TTL is the
--                           controller's override; without one, the operator's (dbthrottle limit)
-- Classes and weights (docs/design.md, "Classes and weights"): a tagged id
-- "<cid>.<serial>.<class>.<weight>.<limit>" names its class ("-": the default class) and its
-- weight w; a permit of weight w is w members of the holders, "id", "id#2" .. "id#w", so that the
-- units in use are ZCARD(holders) for every script and client version alike.
-- ARGV[1] wake prefix: "<prefix>{pool}:wake:"; a grant for id "<cid>.<n>.<limit>" is pushed
--         to the list wake prefix .. cid, on which that process' listener blocks (BLPOP)
-- ARGV[2] kind ("q" or "c"), ARGV[3] the caller's lease (ms), ARGV[4] key TTL (ms)
-- ARGV[5..9] the era (docs/design.md, "Failover and data loss"): the run_id of the server the
--         caller's connection reached ("" when INFO was refused: no era check), when that server
--         started (ms, its clock), Q (ms: how long a quarantine lasts, the longest a live holder
--         takes to re-assert), the adopt token (a cluster slot migrated whole from that server:
--         its state is the same, no quarantine; "" none), and the run_id the caller's process
--         last saw for the pool ("" none: a process new to the pool)
-- Their order and names: lua/protocol/_common.def; a script's own follow them (lua/protocol/).
-- Ids are made by the client: "<cid>.<serial>.<limit>", cid = 16 hex digits per process, or
-- "<G>~<cid>" (G: 16 hex digits, the host group) for a process that shares permits with the other
-- processes of its host (host-level sharing, docs/design.md): grants still go to that cid's list.
-- A dry run (dbthrottle check and run, before a worker starts; cli/preflight.c): the command loads
-- each script's dry-run form, made at build time with `local DRY_RUN = true` in front of this file
-- (tools/embed-lua.sh; the library's has false), and calls it on the pool's
-- keys as a worker would. Every command is first checked against the caller's ACL
-- (redis.acl_check_cmd, Redis 7) with the keys and arguments it would have; then reads run, and
-- every other command answers as if it had done its work (so the script goes on to the commands
-- after it): nothing changes, and a command the user may not run fails with NOPERM, naming the
-- command and its key.
local redis = redis
if DRY_RUN then
    local real = redis
    local READS = {
        GET = true, GETRANGE = true, MGET = true, PTTL = true, TIME = true, HGET = true, HLEN = true,
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
-- NK (keys per semaphore) and semaphore_keys() are made from lua/protocol/keys.def, in front of
-- this file.
-- The common arguments (WAKE, KIND, LEASE, TTL, TOKEN, STARTED, QMS, ADOPT, PREV) are locals made
-- from lua/protocol/_common.def, in front of this file.
local ERA_TTL = 7 * 24 * 3600 * 1000 -- outlives idleness, not forever
-- The counters and histograms outlive the pool's transient keys (three leases), so that what
-- Prometheus reads of them stays monotonic across idle periods of up to a week.
local COUNTER_TTL = ERA_TTL
-- The histograms' bucket upper bounds (ms), the one list (status.lua states it to the command):
-- bucket i holds the values v with bounds[i] < v <= bounds[i + 1] (0-based i), the last one
-- (#bounds) those above every bound. A function, so that a call that needs no list (most values
-- are in the first bucket) does not build the table.
local function HIST_BOUNDS()
    return {1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}
end
local US = '\31' -- separates the info fields that may hold spaces

-- One semaphore: its keys by name, the NK from KEYS[base + 1] (lua/protocol/keys.def), and its
-- kind letter. Every helper below takes the semaphore it works on, so that a script over both
-- kinds (renew.lua, status.lua) says which one each call is about.
local function semaphore(base, kind)
    return semaphore_keys(base, kind)
end

-- The semaphore of a script that works on one: KEYS[1..NK], of kind ARGV[2].
local S = semaphore(0, KIND)

-- The TTL a new key gets: ours, or SEEN's remaining one if longer. So SEEN always expires first
-- and touch() may judge every key by SEEN alone, whatever leases the clients of a pool use.
-- SEEN's TTL is read once per call (s.seen_pttl), and kept up to date where a script sets it: a
-- call creates several keys, and a PTTL each cost as much as the command that made the key. Read
-- earlier in the call, it is at least what it would be now: SEEN still expires first.
local function seen_pttl(s)
    if not s.seen_pttl then
        s.seen_pttl = redis.call('PTTL', s.SEEN)
    end
    return s.seen_pttl
end

local function floor_ttl(s)
    local st = seen_pttl(s)
    if st > TTL then
        return st
    end
    return TTL
end

-- A key that may have just been created: give it a TTL unless it has one (Redis 7: NX).
local function expire_new(s, k)
    redis.call('PEXPIRE', k, floor_ttl(s), 'NX')
end

-- A weight beyond any sane limit is cut here, so that a forged id cannot make a script loop on
-- millions of unit members.
local MAX_WEIGHT = 100000

-- The shape of an id or of one of its unit members ("id#k"): its tag (the class it names, "-" =
-- the default class) and weight when it is tagged, else nil and 1.
local function shape_of(id)
    -- an untagged id has two dots: three plain finds tell it, cheaper than the pattern below
    local dot = string.find(id, '.', 1, true)
    dot = dot and string.find(id, '.', dot + 1, true)
    if not (dot and string.find(id, '.', dot + 1, true)) then
        return nil, 1
    end
    local tag, w = string.match(id, '^[^.#]+%.[^.#]+%.([^.#]+)%.(%d+)%.%d+')
    if not tag then
        return nil, 1
    end
    w = tonumber(w)
    if w < 1 then
        w = 1
    elseif w > MAX_WEIGHT then
        w = MAX_WEIGHT
    end
    return tag, w
end

-- The members of a weighted permit that one command takes (K.on_units): unpack's stack is bounded.
local UNIT_BATCH = 512

-- Counters for dbthrottle status, in STATS (7 days TTL, refreshed by touch).
local function count(s, field, n)
    n = n or 1
    if redis.call('HINCRBY', s.STATS, field, n) == n then -- the field (maybe the key) is new
        redis.call('PEXPIRE', s.STATS, COUNTER_TTL, 'NX')
    end
end

-- One value (ms) into series 'w' (wait) or 'h' (hold) of class klass ("" none): its bucket's
-- count and the series' sum, two HINCRBY (one for a 0, the common grant at once). A weighted
-- permit is one value.
local function observe(s, series, klass, ms)
    klass = klass or ''
    local field
    if ms > 1 then
        local b = HIST_BOUNDS()
        local i = 1
        while b[i + 1] and ms > b[i + 1] do
            i = i + 1
        end
        field = series .. ':' .. i .. ':' .. klass
    else
        field = series .. ':0:' .. klass -- the common value: no number formatted
    end
    if redis.call('HINCRBY', s.HIST, field, 1) == 1 then
        redis.call('PEXPIRE', s.HIST, COUNTER_TTL, 'NX') -- the field (maybe the key) is new
    end
    if ms > 0 then
        redis.call('HINCRBY', s.HIST, series .. ':s:' .. klass, ms)
    end
end

-- Records who holds or waits, since when (now), in what state, granted as which class, and the
-- session its process gave (see KEYS[6]).
local function note_who(s, id, now, who, state, klass, session)
    local v = now .. ' ' .. who .. US .. (state or '') .. US .. (klass or '')
    if session and session ~= '' then
        v = v .. US .. session
    end
    if redis.call('HSET', s.INFO, id, v) == 1 and redis.call('HLEN', s.INFO) == 1 then
        expire_new(s, s.INFO) -- the key is new
    end
end

-- A permit left the holders (released, cancelled after its grant, evicted, expired): how long it
-- was held, from its info (read before it goes: "<since> ...", the class it was granted as after
-- the second \31), into the hold histogram; or `held` (ms), when its holder says how long it held
-- it (release.lua: a permit passed without Redis was held by several in turn, since its grant).
-- Plain finds, and no copy of an empty class: this is every release's cost.
local function observe_hold(s, info, now, held)
    local sp = info and string.find(info, ' ', 1, true)
    local since = sp and tonumber(string.sub(info, 1, sp - 1))
    if not since then
        return
    end
    if held and held >= 0 then
        since = now - held
    end
    local klass = ''
    local state_at = string.find(info, US, sp, true)
    local class_at = state_at and string.find(info, US, state_at + 1, true)
    if class_at then
        local class_end = string.find(info, US, class_at + 1, true) or #info + 1
        if class_end > class_at + 1 then
            klass = string.sub(info, class_at + 1, class_end - 1)
        end
    end
    observe(s, 'h', klass, math.max(0, now - since))
end

-- The functions the uncontended path (nobody queued, no classes defined, untagged ids, no
-- quarantine) does not call: defined on first use, by load_classes (below). A script defines
-- every function of its text on each call (a closure each, and garbage to collect), and linking
-- a closure's upvalues walks the list of every local captured so far (Lua 5.1's findupval): each
-- top-level function costs its own creation and lengthens every later one's walk (the classes'
-- 24 functions cost about 4 us of script CPU per call; the 9 others here, 7 % of an uncontended
-- acquire's Lua instructions). The paths that queue, grant from the queue, or meet classes, tags
-- or a quarantine load them: K.name of a function not defined yet loads them all (the
-- metatable), so that no caller can call one before it is defined.
-- One table, not a local each: every local a function uses is an upvalue its closure links at
-- each call, and many cost as much as the functions themselves.
local load_classes
local K = setmetatable({}, {__index = function(k, name)
    load_classes()
    return rawget(k, name)
end})

-- ---- Eras and quarantine (docs/design.md, "Failover and data loss") ----
-- Redis' holders may lack permits that processes still hold and use: after a failover (the new
-- primary lacks the last writes), a restart (without persistence: everything), keys deleted by
-- hand. Redis would grant them again. So each semaphore remembers the server its state belongs
-- to (ERA); when a call finds another server, or the state missing on a server that started
-- while beliefs from before may live, the semaphore enters a quarantine: no grant until every
-- live holder has had the time (Q) to re-assert its permits by renewing (renew.lua).

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
    if raw == TOKEN .. ' 0 -' then
        return 0 -- the common case, this server's era and no quarantine ever: no pattern to match
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
        K.quarantine(s, now, WHY.CHANGED)
        return s.qleft
    end
    -- Missing: a new pool, a pool idle for 7 days, or the state lost. Beliefs from before can
    -- only live in a process that knew the pool on another server (or before this one's restart):
    -- a process new to the pool, on a pool new to this server, is not made to wait. (PREV is the
    -- pool's, both kinds': a process's first use of the other kind finds that one's era missing,
    -- which is no loss. So a deletion on the same server (FLUSHALL) is left to the evidence rule:
    -- the survivors' next renewal, see renew.lua.)
    if PREV ~= '' and PREV ~= TOKEN then
        K.quarantine(s, now, (now < STARTED + LEASE + QMS) and WHY.RESTARTED or WHY.CHANGED)
        return s.qleft
    end
    redis.call('SET', s.ERA, TOKEN .. ' 0 -', 'PX', ERA_TTL)
    return 0
end

-- ---- Classes (docs/design.md, "Classes and weights") ----
-- The definition text: "aging=<ms>;default=<name>;<name>:<share>:<priority>:<wait_ms>:<cap>;...",
-- share in percent of the limit, larger priority first, wait_ms and cap "-" for none.

-- A pool has at most MAX_CLASSES classes (the C side's DBT_MAX_CLASSES, stated before this file
-- by tools/embed-lua.sh): admin.lua refuses one more, and the workers ship no more. A definition
-- text written by hand or by an older version may hold more (10 000 cost 52 ms a script: Redis
-- stalled for every pool): it is read only DEFS_MAX_BYTES + 1 bytes far, more than any valid text
-- of MAX_CLASSES classes takes (aging=, default= and a class of at most 76 bytes each), and only
-- its first MAX_CLASSES classes are in force (the definitions are marked `over`: status says so).
-- So a script's cost stays bounded whatever is stored: GET would copy the whole value (a 150 kB
-- one cost 300 us a call), GETRANGE copies the bound.
local DEFS_MAX_BYTES = 128 * (MAX_CLASSES + 2)

-- A definitions key's text (at most DEFS_MAX_BYTES + 1 bytes of it), nil when there is none;
-- and the error's text when it cannot be read (a key of another type). A user of the ACL the
-- docs gave before GETRANGE reads it whole, as before (its refusal is in Redis' ACL LOG, and
-- dbthrottle check names it: the dry run asks for GETRANGE itself).
local function defs_text(k)
    local t = (DRY_RUN and redis.call or redis.pcall)('GETRANGE', k, 0, DEFS_MAX_BYTES)
    if type(t) == 'table' and t.err and string.find(t.err, 'NOPERM', 1, true) then
        t = redis.pcall('GET', k)
    end
    if type(t) == 'table' then
        return nil, t.err and tostring(t.err) or 'not a string'
    end
    if t == '' then
        return nil -- GETRANGE of no key (a text is never empty: admin.lua deletes it)
    end
    return t or nil
end

-- The operator's controls of s (the limit override, nil when none; whether grants are stopped),
-- its quarantine (ms left, 0 = none) and its class definitions (s.defs, nil when none), read once
-- per call: one MGET.
-- A caller that read them already in an MGET of its own passes its reply, pre, where they are
-- pre[at], pre[at + 1] and pre[at + 2] (a command fewer).
local function controls(s, now, pre, at)
    if s.drained == nil then
        local c, i = pre, at
        if not c then
            c, i = redis.call('MGET', s.LIM, s.DRAIN, s.ERA), 1
        end
        s.override, s.drained = tonumber(c[i]) or false, c[i + 1] ~= false
        local operator, shipped = defs_text(s.CLASSES), defs_text(s.CLASSES_SEEN)
        if operator or shipped then
            load_classes()
            s.defs = K.effective_defs(operator, shipped)
        end
        era(s, c[i + 2], now)
    end
    return s.override or nil, s.drained, s.qleft
end

-- The longest lease a process may have (DBTHROTTLE_LEASE's bound, 1 h, the C side's settings.c;
-- a live lease too): how long a mark must outlive its cause for any renewer, and how far ahead of
-- Redis' clock a lease can end (an end further ahead was written under another clock).
local MAX_LEASE_MS = 3600000

-- How a renewal writes a lease's new end over `score`, the one Redis has: never earlier (GT): a
-- renewal with a shorter lease (the pool's lease changed live) that runs after one with a longer,
-- or whose reply its process never read, must not end a lease its process still counts on. Unless
-- the end Redis has is beyond any lease from now: written under a clock ahead of this server's (a
-- failover), it is put right, as it was before GT.
local function renew_flags(score, now)
    return (tonumber(score) or 0) > now + MAX_LEASE_MS + 60000 and 'XX' or 'XX GT'
end

-- Sets key's TTL to at least ms: never shortened (a caller with a shorter lease than another's
-- must not cut what the other's marks need). One call on a release's path, as a plain PEXPIRE
-- was: GT lengthens a TTL (the common case: it ran down since the last release); NX gives a key
-- just made (no TTL yet, which GT takes for an endless one) its first.
local function pexpire_at_least(key, ms)
    if redis.call('PEXPIRE', key, ms, 'GT') == 0 then
        redis.call('PEXPIRE', key, ms, 'NX')
    end
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
    pexpire_at_least(s.GONE, math.max(forget - now, 2 * LEASE) + QMS)
end

-- Undeclared keys (the same hash tag, so the same Cluster slot, as the per-tag keys):
--   <owners>:h  ZSET  host group -> the units its holders hold (hold, unhold, reap)
--   <owners>:w  ZSET  owner -> how many of its waiters are queued: OWN's counts, in a set the
--                     worker's ACL lets a script list (ZRANGE; HGETALL it may not run)
--   <owners>:s  ZSET  owner -> the share last computed for it while it waited (so that "s" is
--                     pushed once per fall, not at every acquire)
local function own_key(s, suffix)
    return s.OWN .. ':' .. suffix
end

-- Adds n (may be negative) to owner o's score in the set <owners>:<suffix>; a score that reaches 0
-- leaves the set (its last member gone, Redis deletes it). A count an older client's script left
-- behind starts over when nobody waits (K.unqueued, for :w), and :h is rebuilt from the holders at
-- each refresh of the keys (K.recount_held, from touch): not here, where a ZCARD and a DEL more
-- cost every uncontended release of a process that shares.
local function own_add(s, suffix, o, n)
    if not o or n == 0 then
        return
    end
    local k = own_key(s, suffix)
    local v = tonumber(redis.call('ZADD', k, 'INCR', n, o))
    if v <= 0 then
        redis.call('ZREM', k, o)
    elseif v == n then
        expire_new(s, k) -- new (or a member new in a key that has its TTL): as the pool's others
    end
end

-- The units id's owner holds change by n: counted for host groups only (no share is in force
-- while a plain process waits, so a plain process' holding is never asked for; and a process that
-- does not share pays nothing for shares on its uncontended path). An untagged id's owner is
-- "~<G>" (K.share_member's), found here without loading K: hold and unhold are every grant and
-- release.
local function held_add(s, id, n)
    local g = string.match(id, '^([^./#~]+)~')
    if g then
        own_add(s, 'h', shape_of(id) and K.share_member(id) or ('~' .. g), n)
    end
end

-- Expired entries are removed a bounded batch per call; each is removed once. Until then they
-- count as holders, which can only under-admit.
local REAP_BATCH = 64


local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Id holds a permit of w units until exp: w members of the holders (and of its tag's holders
-- when tagged). units_before: ZCARD(holders) before, when the caller knows it.
local function hold(s, id, w, exp, units_before)
    if w == 1 then
        redis.call('ZADD', s.H, exp, id) -- the common case, without on_units' tables
    else
        K.on_units('ZADD', s.H, id, w, exp)
    end
    if units_before == 0 then
        expire_new(s, s.H) -- the key is new
    end
    held_add(s, id, w)
    local tag = shape_of(id)
    if tag then
        load_classes()
        local hk = K.tag_holders(s, tag)
        K.expire_if_new(s, hk, K.on_units('ZADD', hk, id, w, exp))
        K.note_tag(s, tag)
    end
end

-- Id's permit leaves the holders, all its units. Returns 1 if it was held, else 0.
local function unhold(s, id)
    local tag, w = shape_of(id)
    local n = (w == 1) and redis.call('ZREM', s.H, id) or K.on_units('ZREM', s.H, id, w)
    if n > 0 then
        held_add(s, id, -n)
    end
    if tag then
        load_classes()
        K.on_units('ZREM', K.tag_holders(s, tag), id, w)
    end
    return n > 0 and 1 or 0
end

-- The class machinery and the other functions of paths beyond the uncontended one (see the
-- declaration of K above era()).
load_classes = function()
    if rawget(K, 'parse_defs') then
        return
    end
    -- The limit a waiter configured travels in its id, so whoever releases grants by the waiter's
    -- own limit: a caller is never admitted beyond what it configured.
    K.limit_of = function(id)
        return tonumber(string.match(id, '^[^#]*%.(%d+)')) or 1
    end

    -- Runs `cmd key [flags] score member ...` (ZADD; flags: words, "XX GT") or `cmd key member
    -- ...` (ZREM) over the members of a permit of weight w: id, id#2 .. id#w, a batch at a time
    -- (UNIT_BATCH).
    -- Returns how many the command counted (added, removed).
    K.on_units = function(cmd, key, id, w, score, flag)
        local n, k = 0, 1
        while k <= w do
            local args = {key}
            for f in string.gmatch(flag or '', '%S+') do
                args[#args + 1] = f
            end
            for j = k, math.min(w, k + UNIT_BATCH - 1) do
                if score then
                    args[#args + 1] = score
                end
                args[#args + 1] = (j == 1) and id or (id .. '#' .. j)
            end
            n = n + redis.call(cmd, unpack(args))
            k = k + UNIT_BATCH
        end
        return n
    end

    -- Starts (or lengthens) a quarantine of Q from now: until then no grant is made.
    K.quarantine = function(s, now, why)
        local till = now + QMS
        if s.qleft and s.qleft > 0 and now + s.qleft > till then
            till = now + s.qleft
        end
        redis.call('SET', s.ERA, TOKEN .. ' ' .. till .. ' ' .. why, 'PX', ERA_TTL)
        count(s, 'quarantines')
        s.qleft, s.why = till - now, why
    end

    -- The operator's controls alone, without the era (a call that grants nothing need not start
    -- the era of a pool it only looks at).
    K.operator_controls = function(s)
        if s.drained == nil then
            local c = redis.call('MGET', s.LIM, s.DRAIN)
            return tonumber(c[1]), c[2] ~= false
        end
        return s.override or nil, s.drained
    end

    -- The process ("cid") an id belongs to, "<G>~<cid>" whole for a process that shares with its
    -- host (grants go to the process that queued); of an owner (below): the process, or the group
    -- G.
    K.cid_of = function(id)
        return string.match(id, '^[^./#]+')
    end

    -- Pushes msg to the wake list of process cid, on which its listener blocks (BLPOP); the list
    -- lives TTL ms after its last push.
    K.wake = function(cid, msg)
        local wk = WAKE .. cid
        redis.call('RPUSH', wk, msg)
        redis.call('PEXPIRE', wk, TTL)
    end

    -- One waiter of id's process left the queue (granted, withdrawn, expired). Once the queue is
    -- empty the counts start over: a client of an older version, which removes waiters without
    -- counting, can only make them drift until then.
    K.unqueued = function(s, id)
        load_classes()
        local c = K.owner_of(id)
        if c and redis.call('HINCRBY', s.OWN, c, -1) <= 0 then
            redis.call('HDEL', s.OWN, c)
        end
        own_add(s, 'w', K.share_member(id), -1)
        if redis.call('ZCARD', s.Q) == 0 then
            K.end_told(s) -- nobody waits: no share is in force
            redis.call('DEL', s.OWN, own_key(s, 'w'))
        end
    end

    -- Tells the process whose waiters were the whole queue (OWN['*']), if any, to stop passing
    -- permits between its threads (local handover, see acquire.lua): "f<kind>:<ticket>" on its wake
    -- list, the ticket ordering the message against the replies to its own acquires. Unless
    -- `except` is that process. An owner that is a host group G: on wake:<G>, which each process of
    -- the host listens on beside its own list.
    K.end_sole = function(s, except)
        local sole = redis.call('HGET', s.OWN, '*')
        if not sole or sole == except then
            return sole
        end
        K.wake(K.cid_of(sole), WAKE_MSG.FOREIGN .. s.kind .. ':' .. redis.call('INCR', s.SEQ))
        redis.call('HDEL', s.OWN, '*')
        expire_new(s, s.SEQ)
        return false
    end

    -- A permit kept between commands (DBTHROTTLE_CACHE_PERMITS) serves its connection's next
    -- command without asking Redis: a drain or a new limit would not reach it, and a connection
    -- whose commands come back to back would run on in a drained pool (drain --wait would never
    -- end) or above a lower limit. Every holding process is told to give back what it keeps, as
    -- when a waiter queues: "r<kind>:<ticket>", with a ticket of its own, so that a grant made
    -- before it cannot undo it. (admin.lua's limit and drain, adapt.lua's set; its evict tells
    -- the evicted permit's process alone: ids {ID}.)
    K.recall_kept = function(s, ids)
        local ticket = redis.call('INCR', s.SEQ)
        expire_new(s, s.SEQ)
        K.recall(s, ticket, ids)
    end

    -- "r<kind>:<ticket>" once to the process of each of ids (every holder's when nil), on its
    -- wake list: it gives back the permits it keeps (acquire.lua's first waiter, recall_kept).
    -- An id of a host group ("<G>~<cid>...") may sit on its host's shelf, kept there by another
    -- process than its maker (which may be gone): whose BLPOPs, sent before it kept it, cannot name
    -- the maker's list (CI saw a waiter of another host wait 20 s for nothing). Once to wake:<G>
    -- too, which every BLPOP of the host's processes names; whoever pops it recalls the shelf.
    K.recall = function(s, ticket, ids)
        local told = {}
        local msg = WAKE_MSG.RECALL .. s.kind .. ':' .. ticket
        for _, h in ipairs(ids or redis.call('ZRANGE', s.H, 0, -1)) do
            local cid = string.match(h, '^[^.]+')
            if cid and not told[cid] then
                told[cid] = true
                K.wake(cid, msg)
                local g = string.match(cid, '^([^./#~]+)~')
                if g and not told[g] then
                    told[g] = true
                    K.wake(g, msg)
                end
            end
        end
    end

    K.class_name_ok = function(n)
        return n ~= nil and #n >= 1 and #n <= 32 and n ~= '-' and string.match(n, '^[a-z0-9_%-]+$') ~= nil
    end

    -- An integer in [lo, hi] from text, or nil; "-" is `none` when given.
    K.int_in = function(text, lo, hi, none)
        if none and text == '-' then
            return none
        end
        local v = string.match(text or '', '^%-?%d+$') and tonumber(text)
        if v and v >= lo and v <= hi then
            return v
        end
        return nil
    end

    -- One class, "name:share:priority:wait_ms:cap": its record, or nil and what is wrong with it.
    K.parse_class = function(text)
        local name, share, prio, wait, cap = string.match(text, '^([^:]*):([^:]*):([^:]*):([^:]*):([^:]*)$')
        if not name then
            return nil, 'a class is name:share:priority:wait_ms:cap, not "' .. text .. '"'
        end
        if not K.class_name_ok(name) then
            return nil, 'class name "' .. name .. '" is not 1 to 32 of [a-z0-9_-] (and not "-")'
        end
        local c = {name = name, share = K.int_in(share, 0, 100), priority = K.int_in(prio, -1000, 1000),
            wait = K.int_in(wait, 0, 2 ^ 52, -1), cap = K.int_in(cap, 0, 2 ^ 52, -1)}
        if not c.share then
            return nil, 'share "' .. share .. '" of class ' .. name .. ' is not an integer percent 0..100'
        elseif not c.priority then
            return nil, 'priority "' .. prio .. '" of class ' .. name .. ' is not an integer -1000..1000'
        elseif not c.wait then
            return nil, 'wait "' .. wait .. '" of class ' .. name .. ' is not "-" or ms >= 0'
        elseif not c.cap then
            return nil, 'queue cap "' .. cap .. '" of class ' .. name .. ' is not "-" or an integer >= 0'
        end
        return c
    end

    -- An info value's parts: since (ms, or nil), the base "<host> <pid> <conn>", state, class and
    -- session (the rest, "" none). A value of an older version has the base alone.
    K.info_parts = function(info)
        local since, base, tail = string.match(info or '', '^(%d+) ([^\31]*)(.*)$')
        local state, klass, session = string.match(tail or '', '^\31([^\31]*)\31([^\31]*)\31?(.*)$')
        return tonumber(since), base, state or '', klass or '', session or ''
    end

    -- The implicit default class: what no defined class names is served as, share 0.
    K.implicit_default = function()
        return {name = 'default', share = 0, priority = 0, wait = -1, cap = -1, implicit = true}
    end

    -- A definition text: {aging, default (its name or ""), list (in order), by (name -> class),
    -- dflt (the default class), over}, or nil and what is wrong with it. Over the cap (more than
    -- MAX_CLASSES classes, or longer than DEFS_MAX_BYTES: see defs_text), only the first
    -- MAX_CLASSES classes of the whole parts within DEFS_MAX_BYTES are read, and `over` is true.
    K.parse_defs = function(text)
        local d = {aging = 0, default = '', list = {}, by = {}, over = false}
        local sum = 0
        text = text or ''
        if #text > DEFS_MAX_BYTES then
            text, d.over = string.match(string.sub(text, 1, DEFS_MAX_BYTES), '^(.*);') or '', true
        end
        for part in string.gmatch(text, '[^;]+') do
            local k, v = string.match(part, '^(%l+)=(.*)$')
            if k == 'aging' then
                d.aging = K.int_in(v, 0, 2 ^ 52)
                if not d.aging then
                    return nil, 'aging "' .. v .. '" is not ms >= 0'
                end
            elseif k == 'default' then
                if v ~= '' and not K.class_name_ok(v) then
                    return nil, 'default class "' .. v .. '" is not a class name'
                end
                d.default = v
            elseif k then
                return nil, 'unknown field "' .. k .. '"'
            elseif #d.list == MAX_CLASSES then
                d.over = true
                break
            else
                local c, err = K.parse_class(part)
                if not c then
                    return nil, err
                end
                if d.by[c.name] then
                    return nil, 'class ' .. c.name .. ' is defined twice'
                end
                sum = sum + c.share
                d.list[#d.list + 1] = c
                d.by[c.name] = c
            end
        end
        if sum > 100 then
            return nil, 'the shares sum to ' .. sum .. '%, over 100%'
        end
        d.dflt = d.by[d.default] or d.by['default'] or K.implicit_default()
        return d
    end

    -- The definitions in force: the operator's if any, else those a worker shipped; nil when there
    -- are none (no class and no aging bound: the semaphore behaves as it always did).
    K.effective_defs = function(operator, shipped)
        local d = operator and K.parse_defs(operator)
        local from_worker = false
        if not d and shipped then
            d, from_worker = K.parse_defs(shipped), true
        end
        if not d or (#d.list == 0 and d.aging == 0) then
            return nil
        end
        d.shipped = from_worker
        return d
    end

    -- The class a tag is served as: the one it names, else (the tag "-", an untagged id, a class
    -- since removed or never defined) the default class.
    K.class_of = function(d, tag)
        return (tag and d.by[tag]) or d.dflt
    end

    -- Class c's guarantee at limit L: floor(L * share / 100), at least 1 when its share is not 0.
    K.guarantee = function(c, L)
        if c.share <= 0 then
            return 0
        end
        return math.max(1, math.floor(L * c.share / 100))
    end

    -- A key that an add of `added` members may have just created: give it a TTL unless it has one.
    K.expire_if_new = function(s, key, added)
        if added > 0 and redis.call('ZCARD', key) == added then
            expire_new(s, key)
        end
    end

    -- The tag's keys are in use: it joins the tags set (whose iteration finds them).
    K.note_tag = function(s, tag)
        if redis.call('ZADD', s.TAGS, 0, tag) == 1 then
            expire_new(s, s.TAGS)
        end
    end

    -- Id's permit, whose end Redis has at score, is renewed until exp (only the units still
    -- held: XX), never to an earlier end (renew_flags; docs/design.md, "Live settings per pool").
    K.renew_units = function(s, id, exp, score)
        local flags = renew_flags(score, exp - LEASE)
        local tag, w = shape_of(id)
        K.on_units('ZADD', s.H, id, w, exp, flags)
        if tag then
            K.on_units('ZADD', K.tag_holders(s, tag), id, w, exp, flags)
        end
    end

    -- What selection needs of s with classes defined: the units in use, and per class (by name) the
    -- units held and the waiters queued, from the per-tag keys: O(tags). A tag whose keys are both
    -- empty leaves the tags set.
    K.class_state = function(s, d)
        local st = {units = redis.call('ZCARD', s.H), held = {}, waiting = {}, tags = {}}
        local tagged, others_waiting = 0, 0
        for _, t in ipairs(redis.call('ZRANGE', s.TAGS, 0, -1)) do
            local nh = redis.call('ZCARD', K.tag_holders(s, t))
            local nq = redis.call('ZCARD', K.tag_queue(s, t))
            if nh + nq == 0 then
                redis.call('ZREM', s.TAGS, t)
            else
                st.tags[#st.tags + 1] = t
                local c = K.class_of(d, t)
                st.held[c.name] = (st.held[c.name] or 0) + nh
                st.waiting[c.name] = (st.waiting[c.name] or 0) + nq
                tagged = tagged + nh
                if c ~= d.dflt then
                    others_waiting = others_waiting + nq
                end
            end
        end
        -- untagged holders are the default class's, and so are waiters no tag queue has (queued
        -- untagged before classes were defined)
        local dn = d.dflt.name
        st.held[dn] = (st.held[dn] or 0) + math.max(0, st.units - tagged)
        st.waiting[dn] = math.max(st.waiting[dn] or 0, redis.call('ZCARD', s.Q) - others_waiting)
        return st
    end

    -- The per-tag keys of s (see the top).
    K.tag_queue = function(s, tag)
        return s.Q .. ':' .. tag
    end
    K.tag_holders = function(s, tag)
        return s.H .. ':' .. tag
    end

    -- Who may pass a waiter's permits between its threads (local handover, see acquire.lua): the
    -- process for an untagged id, the process and the shape "<cid>/<class>.<weight>" for a tagged one
    -- (threads pass permits only to threads of the same class and weight). For a cid "<G>~<rest>"
    -- (a process that shares with its host) the owner is the host group G in place of the process:
    -- its verdict is the host's, and end_sole's push goes to wake:<G> (cid_of of the owner), the
    -- list every process of the host listens on.
    K.owner_of = function(id)
        local tag, w = shape_of(id)
        local cid = K.cid_of(id)
        if cid then
            cid = string.match(cid, '^([^~]+)~') or cid
        end
        if tag and cid then
            return cid .. '/' .. tag .. '.' .. w
        end
        return cid
    end

    -- ---- Shares of the limit between host groups (docs/design.md, "Shares") ----
    -- An owner's member in the sets below: owner_of(id), with '~' in front for a host group (an id
    -- "<G>~<cid>..."). Shares are in force only while every waiting owner is a host group without a
    -- shape: a plain process' waiter or a tagged one keeps arrival order (FIFO between processes;
    -- classes and weights decide as before).
    K.share_member = function(id)
        local o, c = K.owner_of(id), K.cid_of(id)
        if o and c and string.find(c, '~', 1, true) then
            return '~' .. o
        end
        return o
    end
    -- The counts of <owners>:h rebuilt from the holders, once per refresh of the pool's keys
    -- (touch): whatever drifted is right again then (a client of an older version that gives
    -- back a grouped permit without counting, a path that does not count), and a count left while
    -- nobody holds goes. O(units held: at most the limit), a ZADD per UNIT_BATCH groups.
    K.recount_held = function(s)
        local by, owners = {}, {}
        for _, m in ipairs(redis.call('ZRANGE', s.H, 0, -1)) do
            local g = string.match(m, '^([^./#~]+)~') -- as held_add counts them
            if g then
                local o = shape_of(m) and K.share_member(m) or ('~' .. g)
                if not by[o] then
                    by[o] = 0
                    owners[#owners + 1] = o
                end
                by[o] = by[o] + 1
            end
        end
        local k = own_key(s, 'h')
        redis.call('DEL', k)
        for i = 1, #owners, UNIT_BATCH do
            local args = {k}
            for j = i, math.min(#owners, i + UNIT_BATCH - 1) do
                args[#args + 1] = by[owners[j]]
                args[#args + 1] = owners[j]
            end
            redis.call('ZADD', unpack(args))
        end
        if owners[1] then
            expire_new(s, k)
        end
    end

    -- The units owner o holds.
    K.held_by = function(s, o)
        return tonumber(redis.call('ZSCORE', own_key(s, 'h'), o) or '0') or 0
    end

    -- Every waiting owner's share of limit L: {rows, by}, rows = {o, d (demand), h (held), share}
    -- in a fixed order, by[o] = the row; nil when nobody waits, or shares are not in force. Demand =
    -- holders + waiters; what is shared, L' = L less the units held by owners that do not wait;
    -- the share L' x demand / the sum of demands, rounded by largest remainder (ties: the owner
    -- holding less, then by name), then at least 1 for every waiting owner (taken from the largest
    -- shares). One owner: its share is L. None in force while more owners wait than L'.
    -- O(waiting owners).
    -- None while the pool is drained (as no process is alone then, acquire.lua): every permit must
    -- come back to Redis, and a share told would let a host pass its permits locally (admin.lua's
    -- drain told each holding host 0; a waiter queueing after it would tell them a share again).
    K.shares = function(s, L)
        local _, drained = K.operator_controls(s) -- (read already by acquire and pump: no command)
        if drained then
            return nil
        end
        -- counted first: with more owners waiting than L (many processes, say) none is listed
        local nw = redis.call('ZCARD', own_key(s, 'w'))
        if nw == 0 then
            return nil
        end
        if nw > L then
            -- More waiting hosts than permits: some share would be 0, and a host with none would
            -- starve while the others pass theirs locally for good. Arrival order.
            return nil
        end
        local ws = redis.call('ZRANGE', own_key(s, 'w'), 0, -1, 'WITHSCORES')
        local rows, by, total = {}, {}, 0
        for i = 1, #ws, 2 do
            if string.sub(ws[i], 1, 1) ~= '~' or string.find(ws[i], '/', 1, true) then
                return nil -- a plain process or a shape waits: arrival order
            end
        end
        local theirs = 0
        for i = 1, #ws, 2 do
            local h = K.held_by(s, ws[i])
            local r = {o = ws[i], h = h, d = h + tonumber(ws[i + 1])}
            rows[#rows + 1] = r
            by[r.o] = r
            total = total + r.d
            theirs = theirs + h
        end
        if #rows == 1 then
            rows[1].share = L
            return {rows = rows, by = by}
        end
        -- What owners that do not wait hold (plain processes, groups with nobody waiting) is not
        -- the waiting owners' to share: shared too, the shares summed above what they can hold,
        -- and a host below a share it could never reach passed its permits locally for good while
        -- another waited for the non-waiting owners' releases.
        L = L - math.max(0, redis.call('ZCARD', s.H) - theirs)
        if #rows > L then
            return nil -- as above: a share of 0 would starve its host
        end
        local given = 0
        for _, r in ipairs(rows) do
            r.share = math.floor(L * r.d / total)
            r.rem = L * r.d - r.share * total
            given = given + r.share
        end
        local order = {}
        for i, r in ipairs(rows) do
            order[i] = r
        end
        table.sort(order, function(a, b)
            if a.rem ~= b.rem then
                return a.rem > b.rem
            end
            if a.h ~= b.h then
                return a.h < b.h
            end
            return a.o < b.o
        end)
        for i = 1, math.min(#order, L - given) do
            order[i].share = order[i].share + 1
        end
        if L >= #rows then
            for _, r in ipairs(order) do
                if r.share == 0 then
                    local big = r
                    for _, q in ipairs(order) do
                        if q.share > big.share then
                            big = q
                        end
                    end
                    big.share = big.share - 1
                    r.share = 1
                end
            end
        end
        return {rows = rows, by = by}
    end

    local SHARE_SCAN = 64
    -- Without classes, while more than one owner waits (sh: shares()): the oldest place of an owner
    -- holding less than its share, else the head. The queue's first SHARE_SCAN places are looked at
    -- (a host's many waiters ahead of another's first are passed over that far).
    K.share_pick = function(s, sh)
        local ids = redis.call('ZRANGE', s.Q, 0, SHARE_SCAN - 1)
        if not ids[1] then
            return nil
        end
        for _, id in ipairs(ids) do
            local r = sh.by[K.share_member(id)]
            if r and r.h < r.share then
                return {id = id}
            end
        end
        return {id = ids[1]}
    end

    -- After a waiter queued (acquire.lua; no classes): every waiting host group whose share changed
    -- since it was last told is told "s<kind>:<share>:<ticket>" on wake:G (which every process of the
    -- host listens on): one that holds more than its new share sends its releases back to Redis until
    -- it holds its share; one at or below it passes them to its own waiters. Not only falls: a host
    -- learns the share it may keep passing within at once, not at its next renewal (lease/3). A
    -- host holding nothing has nothing to pass: it is told once it holds (at the next waiter's
    -- queueing, or its renewal). One push per change and owner; O(waiting owners).
    K.tell_shares = function(s, L)
        local sh = K.shares(s, L)
        if not sh then
            K.end_told(s) -- a plain process or a shape waits, or more owners than L: none in force
            return
        end
        if #sh.rows < 2 then
            return
        end
        local tk = own_key(s, 's')
        for _, r in ipairs(sh.rows) do
            local told = tonumber(redis.call('ZSCORE', tk, r.o) or '')
            if told ~= r.share and r.h > 0 then
                if redis.call('ZADD', tk, r.share, r.o) == 1 then
                    redis.call('PEXPIRE', tk, floor_ttl(s), 'NX')
                end
                local ticket = redis.call('INCR', s.SEQ)
                K.wake(string.sub(r.o, 2), WAKE_MSG.SHARE .. s.kind .. ':' .. r.share .. ':' .. ticket)
            end
        end
    end

    -- Shares stopped being in force (the queue emptied; a plain process or a shaped waiter waits;
    -- more owners wait than the limit): every host group told a share (<owners>:s) is told "none",
    -- "s<kind>:-1:<ticket>", so that it stops passing locally within the share told now, not at its
    -- next renewal; and the shares told are forgotten (the next in force are told anew). One
    -- ZRANGE when nobody was told; one ticket and a push per group told.
    K.end_told = function(s)
        local tk = own_key(s, 's')
        local told = redis.call('ZRANGE', tk, 0, -1)
        if not told[1] then
            return
        end
        local ticket = redis.call('INCR', s.SEQ)
        for _, o in ipairs(told) do
            K.wake(string.sub(o, 2), WAKE_MSG.SHARE .. s.kind .. ':-1:' .. ticket)
        end
        redis.call('DEL', tk)
    end

    -- The operator drains the pool, sets its limit or evicts (admin.lua, adapt.lua): every host
    -- group that holds is told its share is 0, so that its releases go back to Redis (as end_sole
    -- ends a sole host's passing); its next renewal, sent after this, says what is in force then.
    -- The shares told are forgotten, so the next waiter's queueing tells them anew.
    K.end_shares = function(s)
        local ticket
        for _, o in ipairs(redis.call('ZRANGE', own_key(s, 'h'), 0, -1)) do
            if string.sub(o, 1, 1) == '~' and not string.find(o, '/', 1, true) then
                ticket = ticket or redis.call('INCR', s.SEQ)
                K.wake(string.sub(o, 2), WAKE_MSG.SHARE .. s.kind .. ':0:' .. ticket)
            end
        end
        redis.call('DEL', own_key(s, 's'))
    end

    -- Waiter id joins its tag's queue (a tagged id always; an untagged one, under "-", while classes
    -- are defined), so that selection finds the head of each class in O(tags).
    K.queue_tag = function(s, id, ticket)
        local tag = shape_of(id)
        if tag or s.defs then
            tag = tag or '-'
            local qk = K.tag_queue(s, tag)
            K.expire_if_new(s, qk, redis.call('ZADD', qk, ticket, id))
            K.note_tag(s, tag)
        end
    end

    -- Waiter id left the queue: it leaves its tag's queue too (where it may never have been: one
    -- that queued untagged before classes were defined). An untagged one whatever the definitions
    -- now: one that queued while classes were defined is under "-" even after they were cleared
    -- (left there, it would count as a waiter of the default class once they are defined again).
    K.unqueue_tag = function(s, id)
        redis.call('ZREM', K.tag_queue(s, shape_of(id) or '-'), id)
    end

    -- The waiter to serve next (docs/design.md, "Classes and weights"): {id, cls, aged}, or nil.
    -- Without classes: the head of the queue. With them: the head if it has waited the aging bound,
    -- else among the head of each tag's queue, the main queue's head and the newcomer (acquire.lua:
    -- {id}, ranked last in its class), the one that minimises (tier, -priority, ticket), tier 0 when
    -- its class holds fewer units than its guarantee.
    K.choose = function(s, d, st, now, newcomer)
        local mh = redis.call('ZRANGE', s.Q, 0, 0, 'WITHSCORES')
        if not d then
            if mh[1] then
                return {id = mh[1]}
            end
            return newcomer
        end
        if mh[1] and d.aging > 0 then
            local info = redis.call('HGET', s.INFO, mh[1])
            local since = tonumber(info and string.match(info, '^(%d+) ') or '')
            if since and now - since >= d.aging then
                return {id = mh[1], cls = K.class_of(d, (shape_of(mh[1]))), aged = true}
            end
        end
        local best, bt, bp, bk
        local function consider(id, ticket)
            local c = K.class_of(d, (shape_of(id)))
            local tier = ((st.held[c.name] or 0) < K.guarantee(c, s.override or K.limit_of(id))) and 0 or 1
            if not best or tier < bt or (tier == bt and (c.priority > bp or (c.priority == bp and ticket < bk))) then
                best, bt, bp, bk = {id = id, cls = c}, tier, c.priority, ticket
            end
        end
        if mh[1] then
            consider(mh[1], tonumber(mh[2]))
        end
        for _, t in ipairs(st.tags) do
            local qk = K.tag_queue(s, t)
            for _ = 1, 8 do
                local h = redis.call('ZRANGE', qk, 0, 0, 'WITHSCORES')
                if not h[1] then
                    break
                end
                if redis.call('ZSCORE', s.Q, h[1]) then
                    consider(h[1], tonumber(h[2]))
                    break
                end
                redis.call('ZREM', qk, h[1]) -- a ghost: it left the queue by a path that missed this
            end
        end
        if newcomer then
            consider(newcomer.id, math.huge)
        end
        return best
    end
end

local function reap(s, now)
    local dead = redis.call('ZRANGEBYSCORE', s.H, '-inf', now, 'LIMIT', 0, REAP_BATCH)
    if #dead > 0 then
        load_classes()
        redis.call('ZREM', s.H, unpack(dead))
        -- the permits themselves (not their other units) are counted and remembered
        local permits, by_tag, by_owner = {}, {}, {}
        for _, m in ipairs(dead) do
            local o = K.share_member(m)
            if o and string.sub(o, 1, 1) == '~' then
                by_owner[o] = (by_owner[o] or 0) + 1
            end
            if not string.find(m, '#', 1, true) then
                permits[#permits + 1] = m
            end
            local tag = shape_of(m)
            if tag then
                by_tag[tag] = by_tag[tag] or {}
                table.insert(by_tag[tag], m)
            end
        end
        for o, n in pairs(by_owner) do
            own_add(s, 'h', o, -n)
        end
        for tag, members in pairs(by_tag) do
            redis.call('ZREM', K.tag_holders(s, tag), unpack(members))
        end
        if #permits > 0 then
            for _, m in ipairs(permits) do
                observe_hold(s, redis.call('HGET', s.INFO, m), now)
            end
            redis.call('HDEL', s.INFO, unpack(permits))
            count(s, 'expired', #permits)
            -- expired, not lost: its process stops renewing within a lease (two, to be sure)
            note_gone(s, now, permits, now + 2 * LEASE)
        end
    end
    local gone = redis.call('ZRANGEBYSCORE', s.W, '-inf', now, 'LIMIT', 0, REAP_BATCH)
    if #gone > 0 then
        load_classes()
        redis.call('ZREM', s.W, unpack(gone))
        note_gone(s, now, gone, now + 2 * LEASE)
        for _, id in ipairs(gone) do
            if redis.call('ZREM', s.Q, id) == 1 then
                K.unqueued(s, id)
            end
            redis.call('ZREM', K.tag_queue(s, shape_of(id) or '-'), id)
        end
        redis.call('HDEL', s.INFO, unpack(gone))
    end
    return #dead
end

-- The units a permit of id takes at limit L: its weight, cut to L (the command then runs alone);
-- and whether it was cut.
local function units_at(id, L)
    local _, w = shape_of(id)
    if w > L then
        return math.max(L, 1), true
    end
    return w, false
end

-- Grants the waiters selection picks while the one picked fits under its limit (the override,
-- else its own): strict, a heavy waiter picked is not overtaken by lighter ones. A grant moves
-- the waiter to the holders with the lease its process last renewed (a dead waiter's grant
-- expires with it), and pushes "g<kind>:<id>" to its process' wake list.
local function pump(s, now)
    local granted = 0
    if not redis.call('ZRANGE', s.Q, 0, 0)[1] then
        s.idle = true -- (the caller need not count the queue again)
        return 0 -- the common case: nobody waits, and the controls need not be read
    end
    local override, drained, q = controls(s, now)
    if drained or q > 0 then
        return 0 -- in quarantine no grant is made
    end
    load_classes()
    local d = s.defs
    local st = d and K.class_state(s, d) or {units = redis.call('ZCARD', s.H)}
    local sh
    if not d then
        local h = redis.call('ZRANGE', s.Q, 0, 0)[1]
        sh = K.shares(s, override or K.limit_of(h))
        if sh and #sh.rows < 2 then
            sh = nil -- one owner waits: the head, whoever it is
        end
    end
    while true do
        local pick
        if sh then
            pick = K.share_pick(s, sh)
        else
            pick = K.choose(s, d, st, now, nil)
        end
        if not pick then
            break
        end
        local head = pick.id
        local w, clamped = units_at(head, override or K.limit_of(head))
        if st.units + w > (override or K.limit_of(head)) then
            break
        end
        local exp = tonumber(redis.call('ZSCORE', s.W, head)) or (now + LEASE)
        redis.call('ZREM', s.Q, head)
        redis.call('ZREM', s.W, head)
        K.unqueue_tag(s, head)
        K.unqueued(s, head)
        hold(s, head, w, exp, st.units)
        st.units = st.units + w
        if sh then
            local r = sh.by[K.share_member(head)]
            if r then
                r.h = r.h + w
            end
        end
        if d then
            st.held[pick.cls.name] = (st.held[pick.cls.name] or 0) + w
            st.waiting[pick.cls.name] = (st.waiting[pick.cls.name] or 1) - 1
        end
        -- the wait ends now: count it, and the holder's "since" becomes the grant
        local klass = d and pick.cls.name or ''
        local since, base, _, _, session = K.info_parts(redis.call('HGET', s.INFO, head))
        if since then
            local waited = math.max(0, now - since)
            count(s, 'wait_ms', waited)
            observe(s, 'w', klass, waited)
            note_who(s, head, now, base, 'running', klass, session)
        end
        count(s, 'grants')
        if clamped then
            count(s, 'clamped')
        end
        if pick.aged then
            count(s, 'aged')
        end
        K.wake(K.cid_of(head), WAKE_MSG.GRANT .. s.kind .. ':' .. head)
        granted = granted + 1
    end
    return granted
end

-- Keys live TTL ms after the last call that touched them; a TTL is only ever extended, so a
-- client with a short lease cannot expire the keys under a client with a long one. The keys are
-- refreshed together once half of SEEN's TTL has passed, so most calls pay one PTTL; a key
-- created in between gets its TTL where it is created (expire_new), never shorter than SEEN's.
local function touch(s, force)
    local t = seen_pttl(s)
    if not force and t ~= -2 and t >= TTL / 2 then
        return
    end
    s.seen_pttl = false -- refreshed below (or, -2, still missing): read again if asked
    load_classes()
    K.recount_held(s)
    local keys = {s.H, s.Q, s.W, s.SEQ, s.SEEN, s.INFO, s.OWN, s.CLASSES_SEEN, s.TAGS,
        own_key(s, 'h'), own_key(s, 'w'), own_key(s, 's')}
    local per_tag_at = #keys + 1
    for _, t in ipairs(redis.call('ZRANGE', s.TAGS, 0, -1)) do
        keys[#keys + 1] = K.tag_queue(s, t)
        keys[#keys + 1] = K.tag_holders(s, t)
    end
    -- (a tag whose two keys are gone leaves the tags set below: PTTL -2 for both)
    local gone_tags = {}
    local missing = {}
    for _, k in ipairs(keys) do
        local kt = redis.call('PTTL', k)
        if kt ~= -2 and kt < TTL then
            redis.call('PEXPIRE', k, TTL)
        end
        missing[k] = kt == -2
    end
    for i = per_tag_at, #keys, 2 do
        if missing[keys[i]] and missing[keys[i + 1]] then
            gone_tags[#gone_tags + 1] = string.sub(keys[i], #s.Q + 2)
        end
    end
    if #gone_tags > 0 then
        redis.call('ZREM', s.TAGS, unpack(gone_tags))
    end
    redis.call('PEXPIRE', s.ERA, ERA_TTL)
    -- the counters and histograms: a week from now (never shorter: COUNTER_TTL is their longest)
    for _, k in ipairs({s.STATS, s.HIST}) do
        if redis.call('PTTL', k) ~= -2 then
            redis.call('PEXPIRE', k, COUNTER_TTL)
        end
    end
end


-- A dry run also checks the wake lists, which a script writes only when it grants or asks for kept
-- permits back: an idle pool's dry run would not reach those pushes.
if DRY_RUN and WAKE and TTL then
    redis.call('RPUSH', WAKE .. '0000000000000000', 'x')
    redis.call('PEXPIRE', WAKE .. '0000000000000000', TTL)
end
