# large_objects.sh - large objects (lo_* through PQfn), outside and inside a transaction
it_large_objects() {
    printf 'large object payload\n' >"$work/lo.txt"
    chmod 644 "$work/lo.txt"
    rm -f "$work/trace15.log"
    out=$(throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace15.log DBTHROTTLE_LOG_LEVEL=info \
        psql -At -c "\\lo_import '$work/lo.txt'" 2>&1)
    grants=$(grep -c 'event=grant' "$work/trace15.log")
    releases=$(grep -c 'event=release' "$work/trace15.log")
    check "\\lo_import: imported ($out), every grant released ($grants/$releases)" \
        '[ "${out#lo_import }" != "$out" ] && [ "$grants" -ge 1 ] && [ "$grants" = "$releases" ]'
}
