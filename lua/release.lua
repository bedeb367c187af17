-- release.lua: give a permit back and grant the head of the queue.
-- ARG.id, ARG.held_ms (lua/protocol/release.def). Returns 1 if the permit was held, 0 if it was not (expired,
-- or already released). All its units go (a weighted permit's "id#k" members too).
local now = now_ms()
local removed = unhold(S, ARG.id)
if removed == 1 then
    observe_hold(S, redis.call('HGET', S.INFO, ARG.id), now, ARG.held_ms)
end
redis.call('HDEL', S.INFO, ARG.id)
-- a renewal sent before this release may arrive after it: not a loss (see renew.lua)
note_gone(S, now, {ARG.id}, now + QMS)
reap(S, now)
pump(S, now)
touch(S)
return removed
