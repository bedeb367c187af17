# limit_holds_at_the_server.sh - the limit holds at the server
it_limit_holds_at_the_server() {
    # Every statement's start and end come from the server's own log; their largest overlap is the
    # most statements that ran at once. The log's clock has millisecond steps, so each interval is
    # shortened by 1 ms: a false overlap is then impossible, and a real one (a statement too many
    # runs a whole 50 ms) is still seen.
    psql -qAt -c "alter system set log_min_duration_statement = 0" \
        -c "alter system set log_line_prefix = '%m '" -c "select pg_reload_conf()" >/dev/null
    echo "select pg_sleep(0.05);" >"$work/sleep.sql"
    start_line=$(wc -l <"$logfile")
    t0=$(date +%s.%N)
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG=$work/trace1.log DBTHROTTLE_LOG_LEVEL=info \
        pgbench -n -c 32 -j 32 -t 5 -f "$work/sleep.sql" >"$work/pgbench1.out" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    psql -qAt -c "alter system reset log_min_duration_statement" -c "select pg_reload_conf()" >/dev/null
    check "pgbench -c 32 under MAX_QUERIES=4 completes" [ $rc -eq 0 ]
    tail -n +"$((start_line + 1))" "$logfile" | grep 'statement: select pg_sleep(0.05)' >"$work/stmts"
    max=$(awk '{
        split($2, t, ":"); end = t[1] * 3600 + t[2] * 60 + t[3];
        for (i = 1; i <= NF; i++) if ($i == "duration:") d = $(i + 1) / 1000;
        printf "%.6f 1\n%.6f -1\n", end - d, end - 0.001 }' "$work/stmts" | sort -k1,1n -k2,2n |
        awk '{ cur += $2; if (cur > max) max = cur } END { print max + 0 }')
    n=$(wc -l <"$work/stmts")
    check "160 statements ran (saw $n)" [ "$n" -eq 160 ]
    check "at most 4 statements at once at the server (saw $max)" [ "$max" -le 4 ]
    check "the limit was reached (saw $max)" [ "$max" -eq 4 ]
    rate=$(echo "$t0 $t1" | awk '{ printf "%.1f", 160 / ($2 - $1) }')
    info "160 x pg_sleep(0.05) at limit 4: $rate statements/s (ideal 80, with 32 connects)"
    grants=$(grep -c 'event=grant' "$work/trace1.log")
    check "one grant per statement (saw $grants)" [ "$grants" -eq 160 ]
}
