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
-- A member's head: "<cid>.<first> <holds> <dropped> <total>\n". What it counts toward the cap
-- (its holds, at least one: a member of holds not kept is one), and the running total of what
-- the sample's members carried up to it (nil: a member of an older version, one hold a member).
local function head(m)
    local holds, total = string.match(m, '^%S+ (%d+) %d+ (%d+)\n')
    if not holds then
        return 1, nil
    end
    return math.max(1, tonumber(holds)), tonumber(total)
end
local function first_of(range)
    return redis.call('ZRANGE', key, range, range)[1]
end
-- How many holds the sample carries, its newest member's total being `to` (this call's): that
-- less the oldest's, its own counted. With members of another format among them, an upper
-- bound (each member counted as one besides the newest's total), which only trims sooner.
local function count(to)
    local oldest = first_of(0)
    if not oldest then
        return 0
    end
    local c, from = head(oldest)
    if from then
        return to - from + c
    end
    return redis.call('ZCARD', key) + to
end

local carried = math.max(1, ARG.nholds)
local newest = first_of(-1)
local total = carried
if newest then
    local _, before = head(newest)
    total = (before or redis.call('ZCARD', key)) + carried
end
redis.call('ZADD', key, int(now_us), ARG.cid .. '.' .. ARG.first .. ' ' .. ARG.nholds .. ' ' ..
    ARG.dropped .. ' ' .. int(total) .. '\n' .. ARG.holds)
-- The oldest go while the sample carries more than its cap: one call's chunk is at most
-- SAMPLE_CHUNK holds, so as many members at most (and what a version with a larger cap left
-- behind goes within a few calls).
local most = 2 * SAMPLE_CHUNK
local n = count(total)
local removed = 0
while n > SAMPLE_CAP and removed < most do
    local oldest = first_of(0)
    if not oldest then
        break
    end
    redis.call('ZREM', key, oldest)
    n = n - head(oldest)
    removed = removed + 1
end
-- A member is as old as its call: all its holds are older.
local old = redis.call('ZRANGEBYSCORE', key, '-inf', '(' .. int(now_us - SAMPLE_AGE_MS * 1000),
    'LIMIT', 0, most)
if #old > 0 then
    redis.call('ZREM', key, unpack(old))
    n = count(total)
end
redis.call('PEXPIRE', key, SAMPLE_AGE_MS)
return n
