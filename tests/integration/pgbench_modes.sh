# pgbench_modes.sh - pgbench's modes and pipelines: one grant per transaction or pipeline
it_pgbench_modes() {
    # (Kept permits off: each command is judged by its grant, and a kept permit's reuse is none.)
    printf 'BEGIN;\nSELECT 1;\nSELECT 2;\nEND;\n' >"$work/tx.sql"
    for mode in simple extended prepared; do
        # -M prepared also prepares its statements once per connection: 4 more commands.
        want=80
        [ $mode = prepared ] && want=84
        rm -f "$work/trace8.log"
        throttled DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace8.log DBTHROTTLE_LOG_LEVEL=info \
            pgbench -n -M $mode -c 4 -j 4 -t 20 -f "$work/tx.sql" >/dev/null 2>&1
        rc=$?
        grants=$(grep -c 'event=grant' "$work/trace8.log")
        check "pgbench -M $mode: 80 transactions, $want grants (rc $rc, saw $grants)" \
            '[ $rc -eq 0 ] && [ "$grants" -eq $want ]'
    done
    printf '\\startpipeline\nSELECT 1;\nSELECT 2;\nSELECT 3;\n\\endpipeline\n' >"$work/pipe.sql"
    rm -f "$work/trace8.log"
    throttled DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace8.log DBTHROTTLE_LOG_LEVEL=info \
        pgbench -n -M extended -c 4 -j 4 -t 20 -f "$work/pipe.sql" >"$work/pipe.out" 2>&1
    rc=$?
    grants=$(grep -c 'event=grant' "$work/trace8.log")
    releases=$(grep -c 'event=release' "$work/trace8.log")
    check "pgbench pipelines: 80 pipelines, 80 grants, 80 releases (rc $rc, saw $grants/$releases)" \
        '[ $rc -eq 0 ] && [ "$grants" -eq 80 ] && [ "$releases" -eq 80 ]'

    rm -f "$work/trace8.log"
    out=$(throttled DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace8.log DBTHROTTLE_LOG_LEVEL=info \
        "$top/build/tests/pipeline_client" 2>&1)
    grants=$(grep -c 'event=grant' "$work/trace8.log")
    releases=$(grep -c 'event=release' "$work/trace8.log")
    check "staying in pipeline mode: 3 batches, 3 grants, each back after its sync ($out; $grants/$releases)" \
        '[ "$out" = "pipeline on sum 69" ] && [ "$grants" = 3 ] && [ "$releases" = 3 ]'
}
