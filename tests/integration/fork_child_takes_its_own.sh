# fork_child_takes_its_own.sh - fork: the child starts with no permit and takes its own
it_fork_child_takes_its_own() {
    rm -f "$work/trace10.log"
    out=$(throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG=$work/trace10.log DBTHROTTLE_LOG_LEVEL=info \
        "$top/build/tests/fork_client" 2>&1)
    rc=$?
    pids=$(grep 'event=grant' "$work/trace10.log" | sed 's/.* pid=\([0-9]*\).*/\1/' | sort -u | wc -l)
    grants=$(grep -c 'event=grant' "$work/trace10.log")
    check "fork: parent and child both run (rc $rc, $out)" '[ $rc -eq 0 ] && [ "$out" = "child ok" ]'
    check "fork: two grants from two processes (saw $grants from $pids)" \
        '[ "$grants" -eq 2 ] && [ "$pids" -eq 2 ]'
}
