-- acquire.lua: take a permit now, or join the queue.
-- ARGV[5] id, ARGV[6] the caller's limit, ARGV[7] "1" = do not queue (try only),
-- ARGV[8] who asks: "<host> <pid> <conn>" (for dbthrottle status)
-- Returns {status, holders, queue length, limit seen from the previous acquirer or false}
--   status 1 = granted, 2 = queued (a grant will be pushed), 0 = not granted (try only)
local id, limit, try_only, who = ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1', ARGV[8] or '? ? ?'
local now = now_ms()
reap(now)
pump(now)

-- limit_seen paces the TTL refresh of every key (see touch): changing its value must not change
-- its TTL, and when it is new, every key is refreshed at once.
local seen = redis.call('GET', SEEN)
local fresh = not seen
if seen ~= ARGV[6] then
    if seen then
        redis.call('SET', SEEN, ARGV[6], 'KEEPTTL')
    else
        redis.call('SET', SEEN, ARGV[6], 'PX', floor_ttl())
    end
end
if seen == ARGV[6] then
    seen = false
end

-- No barging: a newcomer is admitted only when nobody is queued. The operator's override, when
-- set, is every caller's limit; while the pool is drained, everyone queues.
local override, drained = controls()
local holders = redis.call('ZCARD', H)
if not drained and redis.call('ZCARD', Q) == 0 and holders < (override or limit) then
    redis.call('ZADD', H, now + LEASE, id)
    expire_new(H)
    note_who(id, now, who)
    count('grants')
    touch(fresh)
    return {1, holders + 1, 0, seen}
end
if try_only then
    count('refused')
    touch(fresh)
    return {0, holders, redis.call('ZCARD', Q), seen}
end
local ticket = redis.call('INCR', SEQ)
redis.call('ZADD', Q, ticket, id)
redis.call('ZADD', W, now + LEASE, id)
note_who(id, now, who)
count('queued')
expire_new(SEQ)
expire_new(Q)
expire_new(W)
touch(fresh)
return {2, holders, redis.call('ZCARD', Q), seen}
