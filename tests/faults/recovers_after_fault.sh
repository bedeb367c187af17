# recovers_after_fault.sh - no stall after a Redis blip. At a limit of 1 (lease 8 s, REDIS_TIMEOUT 1 s,
# open) a worker holds the permit for a 7 s statement while two wait; Redis is stopped for 3.5 s,
# so a renewal is sure to time out meanwhile, but the waiters' places stay valid in Redis. They
# must keep waiting (not run unthrottled beside the holder), and once the holder's statement
# ends the permit must move on at once: a newcomer that queued after the blip is granted within
# a second of the holder's end (before, the waiters gave up and left their places to be granted
# to nobody for a lease). Timed by the workers' ready files, their order by the server's log.
echo "# recovers_after_fault: a Redis blip longer than the timeout, shorter than a lease"
c9="PGAPPNAME=c9 DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=8s DBTHROTTLE_REDIS_TIMEOUT=1s DBTHROTTLE_ON_REDIS_ERROR=open"
mark
rm -f "$work"/c9.*.ready
# Lease 8 s: renewed every 2.7 s, so a place's last accepted renewal is at most 6.2 s old when
# Redis answers again, well within a lease (with 6 s, at most 5.5 s plus the scheduler's delays
# under load, near the lease after which a waiter takes its place for lost and gives up).
# 7 s: the two waiters' start, the 3.5 s stop and the newcomer's start and queueing all come
# within it (with 5 s, under load, they came to 4.2-5.8 s).
wargs="-n 1 -s 7000 -W $work/c9.h.ready" spawn "$work/c9.h" $c9
wait_until 10 '[ "$(live_holders)" -eq 1 ]'
c9_waiters=
for w in 1 2; do
    wargs="-n 1 -s 0 -W $work/c9.w$w.ready" spawn "$work/c9.w$w" $c9
    c9_waiters="$c9_waiters $spawned"
done
# Queued in Redis and listening: a waiter whose listener is not connected yet when Redis stops
# makes a call of its own that fails, and runs unthrottled (open) as in any outage (CI saw it
# once: 2 at the server).
wait_until 10 '[ "$(live_waiters)" -eq 2 ] && listening $c9_waiters'
kill -STOP "$redis_pid"
sleep 3.5
kill -CONT "$redis_pid"
wargs="-n 1 -s 0 -W $work/c9.n.ready" spawn "$work/c9.n" $c9
wait_until 10 '[ "$(live_waiters)" -eq 3 ]'
n_queued=$([ "$(live_waiters)" -eq 3 ] && [ ! -e "$work/c9.h.ready" ] && echo yes || echo no)
wait_until 15 '[ -e "$work/c9.h.ready" ]'
t_held=$(now_ms)
wait_until 20 '[ -e "$work/c9.n.ready" ]'
n_ms=$(( $(now_ms) - t_held ))
wait_workers
conc=$(max_conc c9)
# Why a waiter ran beside the holder, if one did: its warn lines.
for pid in $c9_waiters; do
    grep -E "event=(unthrottled|requeue|redis_error).* pid=$pid " "$work/workers.err" | cut -c1-400 |
        while read -r line; do [ "$conc" -le 1 ] || info "c9 waiter: $line"; done
done
check "recovers_after_fault: the newcomer, queued before the holder's statement ended ($n_queued), ran $n_ms ms after it ended (bound 1000)" '[ "$n_queued" = yes ] && [ "$n_ms" -le 1000 ]'
check "recovers_after_fault: the waiters kept their places: never more than 1 at the server (most seen: $conc), all 4 probes ran" '[ "$conc" -eq 1 ] && [ "$(probes c9)" -eq 4 ]'
check "recovers_after_fault: once done nothing was held or queued" 'wait_until 2 "[ \"\$(live_holders)\" -eq 0 ] && [ \"\$(live_waiters)\" -eq 0 ]"'
wargs=
