# restart_empty_admits_no_one_extra.sh - Redis restarted empty (no persistence) while 8 of 64
# workers (MAX_QUERIES=8, lease 6 s, REDIS_TIMEOUT=500ms) are in the middle of 5 s statements:
# every permit they hold is gone from Redis. Judged from PostgreSQL's side (the most statements at
# once, as the advisory-lock counter logs them): in closed mode never more than 8 at once, and
# grants resume within Q + one renewal period (Q = lease/3 + REDIS_TIMEOUT + 1 s = 3.5 s, the
# renewal period 2 s) after Redis is back. The statements and the lease outlast the restart on a
# loaded machine too (Redis was back 2 s after the kill there): with 1.5 s statements and a 3 s
# lease, the holders' statements ended, or were cancelled as their leases lapsed, before Redis
# answered, and none was left to re-assert its permit; with 3 s statements too, once, beside a busy
# loop (Redis down 2136 ms after a kill that came late in the statements: re-asserted 0). In open mode commands run unthrottled while no Redis
# answers, by design: how long and how many is reported, not judged. The figures are printed
# (docs/design.md, "Failover and data loss"). The measurement helpers are tests/support/admission.sh.
echo "# restart_empty_admits_no_one_extra: Redis restarted empty under 64 workers at a limit of 8"
. "$here/../support/admission.sh"
adm_begin
for mode in closed open; do
    app=re$mode
    # -C: stopped, a worker cancels its wait or statement: the fleet, 56 of it queued behind 8
    # statements of 5 s, stops at once instead of after 7 more rounds (37 s of each mode's 60).
    wargs="-n 0 -s 5000 -C"
    adm_fleet 64 $app DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_LEASE=6s DBTHROTTLE_REDIS_TIMEOUT=500ms \
        DBTHROTTLE_ON_REDIS_ERROR=$mode DBTHROTTLE_WAIT_TIMEOUT=2m
    # Until the limit is reached and held: 8 at once.
    wait_until 30 '[ "$(adm_max $app 0)" -ge 8 ]' >/dev/null
    sleep 2
    before=$(adm_now)
    # Early in the holders' statements (8 at once just started: 5 s left, their first renewal
    # 2 s after their grant), so that the restart meets them mid-statement.
    wait_until 10 'adm_full $app 8 $before' >/dev/null
    redis_kill
    rm -f "$work/redis/dump.rdb"
    down=$(adm_now)
    redis_start
    back=$(adm_now)
    # Q + one renewal period, then as long again: the limit must hold throughout.
    sleep 13
    adm_stop_fleet
    wargs=
    most=$(adm_max $app "$before")
    outage_most=$(adm_max $app "$down" "$back")
    after_most=$(adm_max $app "$back")
    resume=$(adm_first $app "$back")
    over=$(adm_over $app 8 "$before")
    holders=$(adm_stat reasserted)
    quarantines=$(adm_stat quarantines)
    info "$mode: Redis down $((back - down)) ms; most at once: $most (before the restart counted too), $outage_most from the kill until it answered again, $after_most after; first statement $resume ms after it was back; above 8 for $over ms; re-asserted ${holders:-0} permits in ${quarantines:-0} quarantine(s)"
    check "restart_empty_admits_no_one_extra ($mode): the 64 workers exited cleanly ($adm_bad bad exits)" '[ "$adm_bad" -eq 0 ]'
    if [ $mode = closed ]; then
        check "restart_empty_admits_no_one_extra (closed): never more than 8 statements at once (most: $most)" '[ "$most" -le 8 ]'
        check "restart_empty_admits_no_one_extra (closed): the holders mid-statement re-asserted their permits (${holders:-0})" '[ "${holders:-0}" -ge 1 ]'
        # Q (3.5 s) + one renewal period (2 s), and 1.5 s for 64 processes to reconnect on 2 cores.
        check "restart_empty_admits_no_one_extra (closed): grants resumed within Q + one renewal period + 1.5 s of Redis being back ($resume ms)" '[ "$resume" -ge 0 ] && [ "$resume" -le 7000 ]'
        check "restart_empty_admits_no_one_extra (closed): after Redis was back, 8 at once again (most: $after_most)" '[ "$after_most" -eq 8 ]'
    else
        # From Q (3.5 s) plus a statement (5 s) after Redis was back: what started unthrottled
        # before has ended.
        check "restart_empty_admits_no_one_extra (open): throttled again once Redis was back and the quarantine over" '[ "$(adm_max $app $((back + 9000)))" -le 8 ]'
    fi
    check "restart_empty_admits_no_one_extra ($mode): once the workers stopped nothing was held or queued" 'wait_until 5 "[ \"\$(live_holders)\" -eq 0 ] && [ \"\$(live_waiters)\" -eq 0 ]"'
done
