# no_deadlock_with_lock_waiters.sh - no deadlock between a transaction and the lock waiters
it_no_deadlock_with_lock_waiters() {
    # MAX_QUERIES=2: T1 updates r in a transaction and then sleeps; T2 and T3 want the same row. If T1
    # gave its permit back between statements, T2 and T3 would hold both permits, blocked on T1's row
    # lock, and T1 could never get one to COMMIT.
    psql -qAt -c "update r set v = 0" >/dev/null
    throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=20s psql -qAt -v ON_ERROR_STOP=1 \
        -c "begin" -c "update r set v = v + 1 where id = 1" -c "select pg_sleep(1)" -c "commit" \
        >/dev/null 2>"$work/t1.err" &
    p1=$!
    sleep 0.3
    throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=20s psql -qAt -v ON_ERROR_STOP=1 \
        -c "update r set v = v + 1 where id = 1" >/dev/null 2>"$work/t2.err" &
    p2=$!
    throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=20s psql -qAt -v ON_ERROR_STOP=1 \
        -c "update r set v = v + 1 where id = 1" >/dev/null 2>"$work/t3.err" &
    p3=$!
    wait $p1; r1=$?
    wait $p2; r2=$?
    wait $p3; r3=$?
    v=$(psql -qAt -c "select v from r where id = 1")
    check "the transaction and both lock waiters complete (rc $r1 $r2 $r3)" \
        '[ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ]'
    check "all three updates applied (v=$v)" [ "$v" = 3 ]
}
