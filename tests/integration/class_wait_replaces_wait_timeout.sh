# class_wait_replaces_wait_timeout.sh - a class's wait (from the definitions) replaces
# DBTHROTTLE_WAIT_TIMEOUT for its commands
it_class_wait_replaces_wait_timeout() {
    classes='interactive=50%;batch=50%,wait=300ms'
    hold_begin cls_wait_holder DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_wait DBTHROTTLE_CLASSES="$classes" DBTHROTTLE_CLASS=interactive
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_wait}:q:holders")" -ge 1 ]'
    t0=$(date +%s%N)
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_wait DBTHROTTLE_CLASSES="$classes" \
        DBTHROTTLE_CLASS=batch DBTHROTTLE_WAIT_TIMEOUT=1m \
        psql -qAt -c "select 'waited ran'" >"$work/cwait.out" 2>"$work/cwait.err"
    rc=$?
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    check "batch's wait=300ms, not WAIT_TIMEOUT=1m: refused (rc $rc) after $ms ms (250 .. 2500)" \
        '[ $rc -ne 0 ] && [ $ms -ge 250 ] && [ $ms -lt 2500 ] && grep -q "no query permit" "$work/cwait.err"'
    check "nothing reached the server" [ ! -s "$work/cwait.out" ]
    hold_end cls_wait_holder
}
