# refusal_reads_like_a_libpq_error.sh - a refusal reads like a libpq error
it_refusal_reads_like_a_libpq_error() {
    hold_begin refusal_holder DBTHROTTLE_MAX_QUERIES=1
    wait_holders q 1
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=200ms psql -qAt -c "select 1" \
        >"$work/refused.out" 2>"$work/refused.err"
    rc=$?
    check "psql refused: exits non-zero (rc $rc)" [ $rc -ne 0 ]
    check "psql refused: says dbthrottle, the pool and the limit" \
        grep -q 'dbthrottle: no query permit for pool "localhost:[0-9]*/postgres" (limit 1) after waiting' "$work/refused.err"
    check "psql refused: nothing reached the server (no output)" [ ! -s "$work/refused.out" ]
    hold_end refusal_holder
}
