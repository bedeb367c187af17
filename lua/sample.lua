-- sample.lua: add a chunk of a process' holds to the command sample (lua/protocol/sample.def).
-- The chunk is one member, its text as the process sent it behind a head line, scored by the
-- call's time on Redis' clock (us): one insertion a call, whatever the chunk carries, so that a
-- shadow fleet holds Redis for microseconds, not a ZADD of a hundred members. Then the oldest
-- members beyond SAMPLE_CAP holds and those older than SAMPLE_AGE_MS go: the sample's size stays
-- bounded whatever the traffic.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = S.SAMPLE
-- Integers as such: a Lua number given to redis.call or .. is written with 14 digits, which would
-- round an arrival (16 digits) to a tenth of a millisecond.
local function int(x)
    return string.format('%.0f', x)
end
-- A member's head: "<cid>.<first>.<built>.<clock> <holds> <dropped> <total>\n". What it counts toward the cap
-- (its holds, at least one: a member of holds not kept is one), and the running total of what
-- the sample's members carried up to it (nil: not a member this version wrote).
local function head(m)
    local holds, total = string.match(m, '^%S+ (%d+) %d+ (%d+)\n')
    if not holds then
        return 1, nil
    end
    return math.max(1, tonumber(holds)), tonumber(total)
end

-- Each member is scored above the newest: its rank is its call's order, so the newest's total is
-- the last written (a Redis whose clock stepped back, or a failover to a server whose clock is
-- behind, must not have each call read the same stale newest and count its chunk as the only
-- one), and scores are distinct, which the report pages by.
local carried = math.max(1, ARG.nholds)
local score, total = now_us, carried
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local foreign = false
if newest[1] then
    local _, before = head(newest[1])
    score = math.max(now_us, tonumber(newest[2]) + 1)
    if before then
        total = before + carried
    else
        foreign = true
    end
end
-- (numbers through int(): a monotonic clock past 10^14 us, 3 years up, is written whole)
redis.call('ZADD', key, int(score), ARG.cid .. '.' .. int(ARG.first) .. '.' .. int(ARG.built) ..
    '.' .. ARG.clock .. ' ' .. ARG.nholds .. ' ' .. ARG.dropped .. ' ' .. int(total) .. '\n' ..
    ARG.holds)
-- How many holds the sample carries: this call's total less the oldest member's, its own
-- counted. Where that cannot be read (a member another version wrote, or totals that do not
-- rise), an upper bound, every member a full chunk: the sample is then trimmed sooner, never
-- later.
local function count()
    local oldest = redis.call('ZRANGE', key, 0, 0)[1]
    if not oldest then
        return 0
    end
    local c, from = head(oldest)
    if from and not foreign and from <= total then
        return total - from + c
    end
    return redis.call('ZCARD', key) * SAMPLE_CHUNK
end
-- The oldest go while the sample carries more than its cap: one call's chunk is at most
-- SAMPLE_CHUNK holds, so as many members at most (and what a version with a larger cap left
-- behind goes within a few calls).
local most = 2 * SAMPLE_CHUNK
local n = count()
local removed = 0
while n > SAMPLE_CAP and removed < most do
    local oldest = redis.call('ZRANGE', key, 0, 0)[1]
    if not oldest then
        break
    end
    redis.call('ZREM', key, oldest)
    removed = removed + 1
    n = count()
end
-- A member is as old as its call: all its holds are older.
local old = redis.call('ZRANGEBYSCORE', key, '-inf', '(' .. int(now_us - SAMPLE_AGE_MS * 1000),
    'LIMIT', 0, most)
if #old > 0 then
    redis.call('ZREM', key, unpack(old))
    n = count()
end
redis.call('PEXPIRE', key, SAMPLE_AGE_MS)
return n
