# exempt_connections.sh - exempt connections get through a pool blocked on a lock
it_exempt_connections() {
    # A plain (unthrottled) session holds r's row lock; two throttled sessions take both permits and
    # block on it. A monitoring connection named by DBTHROTTLE_EXEMPT still runs at once; an ordinary
    # one is refused. The lock is held until the checks are done (its statement cancelled then),
    # not for a fixed time: beside a busy loop, 4 s ran out before the ordinary connection asked,
    # and it got a permit (CI).
    PGAPPNAME=exempt_locker psql -qAt -c "begin" -c "update r set v = v where id = 1" \
        -c "select pg_sleep(120)" -c "commit" >/dev/null 2>&1 &
    locker=$!
    sleep 0.3
    blocked=
    for i in 1 2; do
        throttled DBTHROTTLE_MAX_QUERIES=2 psql -qAt -c "update r set v = v where id = 1" \
            >/dev/null 2>&1 &
        blocked="$blocked $!"
    done
    i=0
    until [ "$(psql -qAt -c "select count(*) from pg_stat_activity where wait_event_type = 'Lock'")" = 2 ] || [ $i -ge 100 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    rm -f "$work/trace12.log"
    t0=$(date +%s%N)
    out=$(throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_EXEMPT='application_name=pg_monitor*,user=nobody' \
        DBTHROTTLE_LOG=$work/trace12.log DBTHROTTLE_LOG_LEVEL=info PGAPPNAME=pg_monitor_probe \
        psql -qAt -c "select 'monitor ok'" 2>&1)
    t1=$(date +%s%N)
    check "exempt monitoring connection runs while the pool is saturated ($out)" [ "$out" = "monitor ok" ]
    check "it took no permit, and the trace says why" \
        '! grep -q event=grant "$work/trace12.log" && grep -q "event=exempt .*rule=pg_monitor\*" "$work/trace12.log"'
    info "exempt query answered in $(( (t1 - t0) / 1000000 )) ms while the pool was saturated"
    throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=200ms PGAPPNAME=app \
        psql -qAt -c "select 1" >/dev/null 2>&1
    rc=$?
    still=$(psql -qAt -c "select count(*) from pg_stat_activity where wait_event_type = 'Lock'")
    check "an ordinary connection is refused meanwhile (rc $rc; $still sessions still blocked)" \
        '[ $rc -ne 0 ] && [ "$still" = 2 ]'
    psql -qAt -c "select pg_cancel_backend(pid) from pg_stat_activity where application_name = 'exempt_locker'" \
        >/dev/null
    wait $locker $blocked
}
