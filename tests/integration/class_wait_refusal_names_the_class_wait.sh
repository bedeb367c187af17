# class_wait_refusal_names_the_class_wait.sh - a wait the class's wait ended says so in the refusal
# (not DBTHROTTLE_WAIT_TIMEOUT, which the operator would raise in vain)
it_class_wait_refusal_names_the_class_wait() {
    classes='interactive=50%;batch=50%,wait=300ms'
    hold_begin cls_wmsg_holder DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_wmsg DBTHROTTLE_CLASSES="$classes" DBTHROTTLE_CLASS=interactive
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_wmsg}:q:holders")" -ge 1 ]'
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_wmsg DBTHROTTLE_CLASSES="$classes" \
        DBTHROTTLE_CLASS=batch DBTHROTTLE_WAIT_TIMEOUT=1m DBTHROTTLE_LOG_LEVEL=error \
        psql -qAt -c "select 'waited ran'" >"$work/cwmsg.out" 2>"$work/cwmsg.err"
    rc=$?
    check "refused by the class's wait, and the message says so ($(tr '\n' ' ' <"$work/cwmsg.err"))" \
        '[ $rc -ne 0 ] && grep -q "wait of class \"batch\" (300 ms)" "$work/cwmsg.err" && ! grep -q DBTHROTTLE_WAIT_TIMEOUT "$work/cwmsg.err"'
    hold_end cls_wmsg_holder
}
