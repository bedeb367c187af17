# status_processes_count_what_redis_holds.sh - the process table's HELD and WAIT are what Redis
# holds for each process now, not what its record said at its last renewal: a process that just
# took a permit (or queued) shows it at once, where it showed 0/0 for a renewal period (lease/3).
it_status_processes_count_what_redis_holds() {
    # The default lease (10 s): a renewal every 3.3 s, the window the record lagged by.
    hold_begin sp_holder DBTHROTTLE_POOL=sp DBTHROTTLE_MAX_QUERIES=1
    sp_holder=$hold_pid
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{sp}:q:holders")" = 1 ]'
    throttled DBTHROTTLE_POOL=sp DBTHROTTLE_MAX_QUERIES=1 PGAPPNAME=sp_waiter psql -qAtX -c "select 1" >/dev/null 2>&1 &
    sp_waiter=$!
    echo "$sp_waiter" >>"$work/pids"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{sp}:q:queue")" = 1 ]'
    # (each was started through a shell function: the psql is its child)
    sp_h=$(pgrep -P "$sp_holder" psql || echo "$sp_holder")
    sp_w=$(pgrep -P "$sp_waiter" psql || echo "$sp_waiter")
    sp_rows=$("$top/build/dbthrottle" status sp --json --redis "redis://127.0.0.1:$rport" |
        $py -c 'import json,sys
d = json.load(sys.stdin)
for p in d["processes"]:
    print(p["pid"], p["held"], p["waiting"])')
    hold_end sp_holder
    wait "$sp_waiter"
    check "status' process table: the holder (pid $sp_h) holds 1, the waiter (pid $sp_w) waits for 1, at once (pid held waiting: $(echo "$sp_rows" | tr '\n' ';'))" \
        'echo "$sp_rows" | grep -qx "$sp_h 1 0" && echo "$sp_rows" | grep -qx "$sp_w 0 1"'
}
