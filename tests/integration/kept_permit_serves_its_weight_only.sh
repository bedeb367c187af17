# kept_permit_serves_its_weight_only.sh - a kept permit (DBTHROTTLE_CACHE_PERMITS) serves a next
# command of its own weight only: another weight takes a permit of its own through Redis (its grants
# counter)
it_kept_permit_serves_its_weight_only() {
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_k DBTHROTTLE_CACHE_PERMITS=on \
        DBTHROTTLE_CACHE_IDLE=1m DBTHROTTLE_WEIGHTS='2:sql=/\* heavy \*/' \
        psql -qAt -c "select 1" -c "select 2" -c "select 3 /* heavy */" -c "select 4 /* heavy */" \
        >"$work/kept.out" 2>&1
    rc=$?
    grants=$(rcli hget "dbthrottle:{cls_k}:q:stats" grants)
    check "4 commands ran (rc $rc: $(tr '\n' ' ' <"$work/kept.out"))" '[ $rc -eq 0 ] && [ "$(wc -l <"$work/kept.out")" -eq 4 ]'
    check "2 grants in Redis (saw $grants): one light, kept for the next light; one heavy, kept for the next heavy" \
        '[ "$grants" = 2 ]'
}
