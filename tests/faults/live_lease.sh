# live_lease.sh - the lease set live by the operator (dbthrottle set POOL lease ...;
# docs/operations.md, "Live settings"), judged in Redis (the holders' expiry, by its clock) and at
# the server (how many probes ran at once, and when). At a limit of 1:
# - shortened under load (own 10 s, live 1 s): the holders' leases in Redis are at most 1 s once
#   those given before have run out (a renewal never ends a lease sooner than it was: GT), and a
#   holder killed in its statement gives its permit back within the live lease (a waiter runs
#   about a second later, not 10 s), after its statement ended at the server;
# - refused by a worker whose server check (1 s, the default for its own lease) could not end a
#   dead client's statement within it: its record in Redis says so;
# - lengthened (own 1 s, live 6 s): a holder stopped 2.5 s in its statement keeps its permit, so the
#   waiter behind it does not run beside its statement, and the holder does not take it for lost.
# Never more than 1 at the server meanwhile. The workers under the live 1 s lease ask the server
# to check their connections every 200 ms (4 x that is within the lease).
echo "# live_lease: the lease set live, shortened under load and lengthened"
ll_cli() { "$top/build/dbthrottle" "$@" --redis "redis://127.0.0.1:$rport"; }
# ll_left POOL: the most ms of a lease left among the pool's query holders, by Redis' clock (-1:
# none held).
ll_left() {
    rcli --raw eval "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)
        local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
        return top[2] and tonumber(top[2]) - now or -1" 1 "dbthrottle:{$1}:q:holders"
}
# ll_most POOL N: the most of N samples of ll_left, 100 ms apart (a sample Redis did not answer
# counts as 999999: the check fails, and says so).
ll_most() {
    lm=-1
    for _ in $(seq "$2"); do
        v=$(ll_left "$1")
        case $v in '' | *[!0-9-]*) v=999999 ;; esac
        [ "$v" -le "$lm" ] || lm=$v
        sleep 0.1
    done
    echo "$lm"
}
# ll_active APP: how many of APP's statements the server runs now.
ll_active() {
    psql -XAtc "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$1' AND state = 'active'"
}
ll="DBTHROTTLE_POOL=ll DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_LEASE=10s
    DBTHROTTLE_SERVER_CHECK_INTERVAL=200ms"

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
check "live_lease: dbthrottle set wrote the live lease ($(head -1 "$work/ll.set")), and says who refuses one under 4 s ($(grep -c "note: a worker refuses a live lease" "$work/ll.set") note)" \
    'grep -q "lease = 1s, live" "$work/ll.set" && grep -q "note: a worker refuses a live lease" "$work/ll.set"'
# Taken by every looper within a renewal (3.3 s at their own 10 s lease), as their records in
# Redis say; a looper that has not taken it yet still acquires with 10 s (CI once sampled one).
# The leases given before run out within 10 s of it (a permit passed on and on between the
# workers keeps its end until then). From then on every lease Redis holds was given or renewed
# with 1 s.
ll_applied() { # how many of the pool's processes applied the live version Redis holds
    ll_cli status ll --json 2>/dev/null | python3 -c 'import json, sys
p = json.load(sys.stdin)["pools"][0].get("live_settings", {}).get("processes", {})
print(p.get("applied", 0) if not p.get("behind") else -1)'
}
wait_until 15 '[ "$(ll_applied)" -ge 3 ]'
applied_ms=$waited_ms
# No call carries 10 s from here on, and no end given with it outlives it: a place queued with
# it and granted later keeps its end too (classes' waits last seconds), so the bound is a whole
# old lease (and a second for a late renewer), not the first sample under 1 s.
t_applied=$(now_ms)
wait_until 15 '[ $(($(now_ms) - t_applied)) -ge 11000 ]'
after=$(ll_most ll 20)
check "live_lease: shortened live to 1 s, Redis' holders carry it (most left: $before ms before, $after ms after; all 3 applied it by $applied_ms ms)" \
    '[ "$before" -gt 3000 ] && [ "$after" -gt 0 ] && [ "$after" -le 1000 ]'
for p in $ll_loopers; do kill -TERM "$p"; done
wait_workers
conc=$(max_conc ll)
check "live_lease: never more than 1 at the server across the change (most seen: $conc, $(probes ll) probes)" \
    '[ "$conc" -eq 1 ] && [ "$(probes ll)" -gt 10 ]'

# A holder killed in its statement: its permit is back within the live lease, not its own; and
# its statement ended at the server before the waiter's began.
wait_until 10 '[ "$(ll_left ll)" -eq -1 ]' # the loopers' last permits went back
mark
rm -f "$work/ll.w.ready"
wargs="-n 1 -s 20000" spawn "$work/ll.h" $ll PGAPPNAME=ll
ll_h=$spawned
wait_until 10 '[ "$(ll_active ll)" -eq 1 ]'
held=$(ll_left ll)
ll_backend=$(psql -XAtc "SELECT pid FROM pg_stat_activity WHERE application_name = 'll' AND state = 'active'")
wargs="-n 1 -s 0 -W $work/ll.w.ready" spawn "$work/ll.w" $ll PGAPPNAME=ll
wait_until 10 '[ "$(live_waiters q "dbthrottle:{ll}")" -eq 1 ]'
kill -9 "$ll_h"
t_kill=$(now_ms)
wait_until 15 '[ -e "$work/ll.w.ready" ]'
back_ms=$(($(now_ms) - t_kill))
wait_workers
ll_log=$(tail -n +"$((log_mark + 1))" "$work/pg/server.log")
ll_lost=$(echo "$ll_log" | grep -n "\[${ll_backend:-0}\] FATAL:  connection to client lost" | head -1 | cut -d: -f1)
ll_second=$(echo "$ll_log" | grep -n "dbt_conc app=ll n=" | sed -n 2p | cut -d: -f1)
check "live_lease: a holder killed under the live 1 s lease (its own 10 s; $held ms left in Redis): the waiter ran $back_ms ms later (bound 3000)" \
    '[ "$held" -gt 0 ] && [ "$held" -le 1000 ] && [ -e "$work/ll.w.ready" ] && [ "$back_ms" -le 3000 ]'
check "live_lease: ... after the killed holder's statement ended at the server (its line ${ll_lost:-none}, the waiter's probe ${ll_second:-none}; most at once: $(max_conc ll))" \
    '[ -n "$ll_lost" ] && [ -n "$ll_second" ] && [ "$ll_lost" -lt "$ll_second" ] && [ "$(max_conc ll)" -eq 1 ]'
psql -XAtqc "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'll'" >/dev/null
# A worker whose server check is the default (1 s at its own 10 s lease) refuses the live 1 s: it
# keeps its own, and its record in Redis names the key it refused.
ll_refusing() {
    ll_cli status ll --json 2>/dev/null | python3 -c 'import json, sys
for p in json.load(sys.stdin)["pools"][0].get("live_settings", {}).get("processes", {}).get("refusing", []):
    print("%d:%s" % (p["pid"], p["refused"]))'
}
wargs="-n 1 -s 0 -E $work/ll.r.end" spawn "$work/ll.r" DBTHROTTLE_POOL=ll DBTHROTTLE_MAX_QUERIES=1 \
    DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_LEASE=10s PGAPPNAME=ll_r DBTHROTTLE_LOG="$work/ll.r.log"
ll_r=$spawned
wait_until 10 'll_refusing | grep -q "^$ll_r:lease"'
check "live_lease: a worker whose server check is 1 s refuses the live 1 s lease ($(ll_refusing | tr '\n' ' '); $(grep -o 'refused="lease: [^"]*' "$work/ll.r.log" | cut -c1-120))" \
    'll_refusing | grep -q "^$ll_r:lease"'
touch "$work/ll.r.end"
wait_workers
ll_cli set ll lease --clear >/dev/null 2>&1

# Lengthened: own 1 s, live 6 s. A holder stopped for 2.5 s (over its own lease, within the
# live one) keeps its permit: the waiter runs after the holder's statement, not beside it.
ll2="DBTHROTTLE_POOL=ll2 DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_LEASE=1s"
mark
rm -f "$work/ll2.w.ready"
wargs="-n 1 -s 0" spawn "$work/ll2.first" $ll2 PGAPPNAME=ll2
wait_workers
ll_cli set ll2 lease 6s >"$work/ll2.set" 2>&1
wargs="-n 1 -s 8000" spawn "$work/ll2.h" $ll2 PGAPPNAME=ll2 DBTHROTTLE_LOG="$work/ll2.h.log"
ll2_h=$spawned
wait_until 10 '[ "$(ll_active ll2)" -eq 1 ]'
# Its first command waited for the live settings: the lease it was granted is the live one.
held=$(ll_most ll2 5)
wargs="-n 1 -s 0 -W $work/ll2.w.ready" spawn "$work/ll2.w" $ll2 PGAPPNAME=ll2
wait_until 10 '[ "$(live_waiters q "dbthrottle:{ll2}")" -eq 1 ]'
kill -STOP "$ll2_h"
sleep 2.5
kill -CONT "$ll2_h"
running=$(ll_active ll2) # its statement still ran: the stop was inside it
wait_workers
conc=$(max_conc ll2)
check "live_lease: lengthened live to 6 s (its own 1 s), Redis' holder carries it (most left: $held ms)" \
    '[ "$held" -gt 1000 ] && [ "$held" -le 6000 ]'
check "live_lease: a holder stopped 2.5 s in its statement ($running running at the end of the stop) kept its permit: never more than 1 at the server (most seen: $conc), 3 probes" \
    '[ "$running" -eq 1 ] && [ "$conc" -eq 1 ] && [ "$(probes ll2)" -eq 3 ] && [ -e "$work/ll2.w.ready" ]'
check "live_lease: ... and did not take it for lost ($(grep -c "event=lease_lost" "$work/ll2.h.log") lease_lost lines)" \
    '! grep -q "event=lease_lost" "$work/ll2.h.log"'
ll_cli set ll2 lease --clear >/dev/null 2>&1
