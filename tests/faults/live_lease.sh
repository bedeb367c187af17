# live_lease.sh - the lease set live by the operator (dbthrottle set POOL lease ...;
# docs/operations.md, "Live settings"), judged in Redis (the holders' expiry, by its clock) and at
# the server (how many probes ran at once, and when). At a limit of 1:
# - shortened under load (own 10 s, live 1 s): the holders' leases in Redis are at most 1 s from
#   then on, and a holder killed in its statement gives its permit back within the live lease
#   (a waiter runs about 1.3 s later, not 10 s);
# - lengthened (own 1 s, live 6 s): a holder stopped for 2.5 s keeps its permit in Redis, so the
#   waiter behind it does not run beside its statement, and the holder does not take it for lost.
# Never more than 1 at the server meanwhile. Its second half runs unthrottled beside nothing: the
# killed holder's statement is of its own application (the server check, set at connect by the
# process' own lease, ends it within a second: docs/operations.md says so).
echo "# live_lease: the lease set live, shortened under load and lengthened"
ll_cli() { "$top/build/dbthrottle" "$@" --redis "redis://127.0.0.1:$rport"; }
# ll_left POOL: the most ms of a lease left among the pool's query holders, by Redis' clock (-1:
# none held).
ll_left() {
    rcli --raw eval "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)
        local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
        return top[2] and tonumber(top[2]) - now or -1" 1 "dbthrottle:{$1}:q:holders"
}
# ll_most POOL N: the most of N samples of ll_left, 100 ms apart.
ll_most() {
    lm=-1
    for _ in $(seq "$2"); do
        v=$(ll_left "$1")
        [ "$v" -le "$lm" ] || lm=$v
        sleep 0.1
    done
    echo "$lm"
}
ll="DBTHROTTLE_POOL=ll DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_LEASE=10s"

# Shortened under load: three workers, 30 ms probes, one at a time.
mark
ll_loopers=
for i in 1 2 3; do
    wargs="-n 0 -s 30" spawn "$work/ll.loop$i" $ll PGAPPNAME=ll
    ll_loopers="$ll_loopers $spawned"
done
wait_until 10 '[ "$(ll_left ll)" -gt 0 ]'
before=$(ll_most ll 5)
ll_cli set ll lease 1s >"$work/ll.set" 2>&1
check "live_lease: dbthrottle set wrote the live lease ($(head -1 "$work/ll.set"))" \
    'grep -q "lease = 1s, live" "$work/ll.set"'
# Taken within a renewal (3.3 s at the workers' own 10 s lease); then every lease Redis holds
# was given or renewed with 1 s.
sleep 4.5
after=$(ll_most ll 30)
check "live_lease: shortened live to 1 s, Redis' holders carry it (most left: $before ms before, $after ms after)" \
    '[ "$before" -gt 3000 ] && [ "$after" -gt 0 ] && [ "$after" -le 1000 ]'
for p in $ll_loopers; do kill -TERM "$p"; done
wait_workers
conc=$(max_conc ll)
check "live_lease: never more than 1 at the server across the change (most seen: $conc, $(probes ll) probes)" \
    '[ "$conc" -eq 1 ] && [ "$(probes ll)" -gt 10 ]'

# A holder killed in its statement: its permit is back within the live lease, not its own.
rm -f "$work/ll.w.ready"
wargs="-n 1 -s 20000" spawn "$work/ll.h" $ll PGAPPNAME=ll_dead
ll_h=$spawned
wait_until 10 '[ "$(ll_left ll)" -gt 0 ]'
wargs="-n 1 -s 0 -W $work/ll.w.ready" spawn "$work/ll.w" $ll PGAPPNAME=ll
wait_until 10 '[ "$(live_waiters q "dbthrottle:{ll}")" -eq 1 ]'
kill -9 "$ll_h"
t_kill=$(now_ms)
wait_until 15 '[ -e "$work/ll.w.ready" ]'
back_ms=$(($(now_ms) - t_kill))
wait_workers
check "live_lease: a holder killed under the live 1 s lease (its own 10 s): the waiter ran $back_ms ms later (bound 3000)" \
    '[ -e "$work/ll.w.ready" ] && [ "$back_ms" -le 3000 ]'
ll_cli set ll lease --clear >/dev/null 2>&1

# Lengthened: own 1 s, live 6 s. A holder stopped for 2.5 s (over its own lease, within the
# live one) keeps its permit: the waiter runs after the holder's statement, not beside it.
ll2="DBTHROTTLE_POOL=ll2 DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_LEASE=1s"
mark
rm -f "$work/ll2.w.ready"
wargs="-n 1 -s 0" spawn "$work/ll2.first" $ll2 PGAPPNAME=ll2
wait_workers
ll_cli set ll2 lease 6s >"$work/ll2.set" 2>&1
wargs="-n 1 -s 5000" spawn "$work/ll2.h" $ll2 PGAPPNAME=ll2 DBTHROTTLE_LOG="$work/ll2.h.log"
ll2_h=$spawned
wait_until 10 '[ "$(ll_left ll2)" -gt 0 ]'
# Its first command waited for the live settings: the lease it was granted is the live one.
held=$(ll_most ll2 5)
wargs="-n 1 -s 0 -W $work/ll2.w.ready" spawn "$work/ll2.w" $ll2 PGAPPNAME=ll2
wait_until 10 '[ "$(live_waiters q "dbthrottle:{ll2}")" -eq 1 ]'
kill -STOP "$ll2_h"
sleep 2.5
kill -CONT "$ll2_h"
wait_workers
conc=$(max_conc ll2)
check "live_lease: lengthened live to 6 s (its own 1 s), Redis' holder carries it (most left: $held ms)" \
    '[ "$held" -gt 1000 ] && [ "$held" -le 6000 ]'
check "live_lease: a holder stopped 2.5 s kept its permit: never more than 1 at the server (most seen: $conc), 3 probes" \
    '[ "$conc" -eq 1 ] && [ "$(probes ll2)" -eq 3 ] && [ -e "$work/ll2.w.ready" ]'
check "live_lease: ... and did not take it for lost ($(grep -c "event=lease_lost" "$work/ll2.h.log") lease_lost lines)" \
    '! grep -q "event=lease_lost" "$work/ll2.h.log"'
ll_cli set ll2 lease --clear >/dev/null 2>&1
