# copy_holds_one_permit.sh - COPY holds one permit until it ends
it_copy_holds_one_permit() {
    psql -qAt -c "create table big (n int)" >/dev/null
    seq 1 100000 >"$work/rows"
    rm -f "$work/trace9.log"
    # (Kept permits off: each command is judged by its grant, and a kept permit's reuse is none.)
    throttled DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LOG=$work/trace9.log DBTHROTTLE_LOG_LEVEL=info \
        psql -qAt -c "\\copy big from '$work/rows'" -c "\\copy big to '$work/out'" >/dev/null 2>&1
    rc=$?
    grants=$(grep -c 'event=grant' "$work/trace9.log")
    lines=$(wc -l <"$work/out")
    check "COPY FROM and COPY TO of 100 000 rows: one grant each (rc $rc, saw $grants, $lines rows)" \
        '[ $rc -eq 0 ] && [ "$grants" -eq 2 ] && [ "$lines" -eq 100000 ]'
}
