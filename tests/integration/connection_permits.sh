# connection_permits.sh - connection permits: at most N backends open at once
it_connection_permits() {
    # Each session's life comes from the server log, by backend pid: from "connection authorized"
    # to the end of its statement (its "duration:" line), the last thing the session does before
    # its client closes it and gives the permit back; their largest overlap is the most sessions
    # open at once. (Not to the backend's "disconnection" line: a backend logs it as it exits,
    # after its client has closed and released, and on a loaded machine that came after the next
    # session had started: 3 "at once" at a limit of 2, with every client within its permit.)
    psql -qAt -c "alter system set log_connections = on" -c "alter system set log_disconnections = on" \
        -c "alter system set log_min_duration_statement = 0" \
        -c "alter system set log_line_prefix = '%m [%p] '" -c "select pg_reload_conf()" >/dev/null
    start_line=$(wc -l <"$logfile")
    pids=
    for i in 1 2 3 4 5; do
        throttled DBTHROTTLE_MAX_CONNECTIONS=2 DBTHROTTLE_WAIT_TIMEOUT=30s PGAPPNAME=conntest \
            psql -qAt -c "select pg_sleep(0.3)" >/dev/null 2>&1 &
        pids="$pids $!"
    done
    rcs=0
    for p in $pids; do wait $p || rcs=$((rcs + 1)); done
    psql -qAt -c "alter system reset log_connections" -c "alter system reset log_disconnections" \
        -c "alter system reset log_min_duration_statement" -c "select pg_reload_conf()" >/dev/null
    tail -n +"$((start_line + 1))" "$logfile" >"$work/conns"
    maxc=$(awk '
        function t(s,  a) { split(s, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
        /connection authorized: .*application_name=conntest/ { gsub(/[][]/, "", $4); start[$4] = t($2) }
        / duration: / { p = $4; gsub(/[][]/, "", p); if (p in start) end[p] = t($2) }
        END { for (p in start) if (p in end) printf "%.6f 1\n%.6f -1\n", start[p], end[p] }
        ' "$work/conns" | sort -k1,1n -k2,2n | awk '{ cur += $2; if (cur > max) max = cur } END { print max + 0 }')
    nended=$(grep -c ' duration: .*pg_sleep(0.3)' "$work/conns")
    nconn=$(grep -c 'connection authorized: .*application_name=conntest' "$work/conns")
    check "MAX_CONNECTIONS=2, 5 clients: all ran (failures: $rcs, backends: $nconn)" \
        '[ $rcs -eq 0 ] && [ "$nconn" -eq 5 ]'
    check "never more than 2 sessions open at once (saw $maxc; $nended of the 5 statements' ends logged)" \
        '[ "$maxc" -le 2 ] && [ "$maxc" -ge 1 ] && [ "$nended" -ge 5 ]'
    # The permit goes back once the connection is closed, not before: in the client's own system
    # calls, the close of its PostgreSQL socket comes before the release.lua sent for the permit
    # (the other way round, the connection it admits could open while this one still is). A call
    # another thread's call interrupts is split by strace ("close(5 <unfinished ...>"; CI once
    # read no close at all): its first half is the call.
    throttled DBTHROTTLE_MAX_CONNECTIONS=1 strace -f -qq -s 512 -o "$work/finish.strace" \
        -e trace=connect,close,write,writev,sendto,sendmsg psql -qAt -c "select 1" >/dev/null 2>&1
    release_sha=$(sed -n 's/.*dbt_script_release = {"release", body_release, [0-9]*, "\([0-9a-f]*\)"};/\1/p' \
        "$top/build/gen/scripts.c")
    order=$(awk -v port="$PGPORT" -v sha="$release_sha" '
        /connect\(/ && index($0, "htons(" port ")") && !fd { match($0, /connect\([0-9]+/); fd = substr($0, RSTART + 8, RLENGTH - 8) }
        fd && !closed && (index($0, "close(" fd ")") || index($0, "close(" fd " <unfinished")) { closed = NR }
        sha && index($0, sha) && /:c:holders/ { release = NR }
        END { if (closed && release > closed) print "closed, then released"
              else print "released at line " release ", closed at line " closed }' "$work/finish.strace")
    check "a connection permit goes back after its socket is closed ($order)" \
        '[ "$order" = "closed, then released" ]'
    hold_begin conn_holder DBTHROTTLE_MAX_CONNECTIONS=1
    wait_holders c 1
    throttled DBTHROTTLE_MAX_CONNECTIONS=1 DBTHROTTLE_WAIT_TIMEOUT=200ms psql -qAt -c "select 1" \
        >/dev/null 2>"$work/connrefused.err"
    rc=$?
    check "a refused connection: psql fails with the dbthrottle message (rc $rc)" \
        '[ $rc -ne 0 ] && grep -q "dbthrottle: no connection permit for pool" "$work/connrefused.err"'
    hold_end conn_holder
}
