-- sample.lua: add a chunk of a process' holds to the command sample (lua/protocol/sample.def).
-- A member per hold, scored by its arrival on Redis' clock (us); then the oldest beyond
-- SAMPLE_CAP and those older than SAMPLE_AGE_MS go: the sample's size stays bounded whatever the
-- traffic.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = S.SAMPLE
local serial = ARG.first
local add = {}
-- Scores as whole numbers of us: a Lua number given to redis.call is written with 14 digits,
-- which would round an arrival (16 digits) to a tenth of a millisecond.
for ago, rest in string.gmatch(ARG.holds, '(%d+) ([^\n]*)\n') do
    add[#add + 1] = string.format('%.0f', now_us - tonumber(ago))
    add[#add + 1] = ARG.cid .. '.' .. serial .. ' ' .. rest
    serial = serial + 1
end
if ARG.dropped > 0 then
    add[#add + 1] = string.format('%.0f', now_us)
    add[#add + 1] = ARG.cid .. '.' .. serial .. ' x ' .. ARG.dropped
end
if #add > 0 then
    -- (unpack takes at most a few thousand values: a chunk is DBT_SAMPLE_CHUNK holds)
    redis.call('ZADD', key, unpack(add))
end
local function remove(members)
    if #members > 0 then
        redis.call('ZREM', key, unpack(members))
    end
end
-- Twice a chunk per call at most: more than any call adds, so the bound is kept (and what a
-- version with a larger cap left behind goes within a few calls).
local most = 2 * SAMPLE_CHUNK
local n = redis.call('ZCARD', key)
if n > SAMPLE_CAP then
    local over = redis.call('ZRANGE', key, 0, math.min(n - SAMPLE_CAP, most) - 1)
    remove(over)
    n = n - #over
end
local old = redis.call('ZRANGEBYSCORE', key, '-inf',
    '(' .. string.format('%.0f', now_us - SAMPLE_AGE_MS * 1000), 'LIMIT', 0, most)
remove(old)
n = n - #old
redis.call('PEXPIRE', key, SAMPLE_AGE_MS)
return n
