# held_prepared.sh - the rest of the family: PQsendPrepare, PQsendQueryPrepared,
# PQsendDescribePrepared, each held behind a holder of its own
it_held_prepared() {
    for step in prepare query_prepared describe_prepared; do
        mark
        hc_hold held_s held_s 2500
        if [ $step = prepare ]; then hc_run held_s prepared DBTHROTTLE_WAIT_TIMEOUT=30s; else hc_go $step; fi
        hc_line ${step}_result
        wait "$hc_holder"
        case $step in
        query_prepared) want=TUPLES_OK:1,NULL ;; # the probe ran alone: after the holder's
        *) want=COMMAND_OK,NULL ;;
        esac
        check "held_s: PQsend_$step returns 1 at once, busy, nothing to flush; its result once the holder is done ($(grep "^${step}_" "$hc_out" | tr '\n' ' '))" \
            '[ "$(hc_val ${step}_send)" = 1 ] && [ "$(hc_ms ${step}_send_ms)" -lt 1000 ] && [ "$(hc_val ${step}_busy)" = 1 ] && [ "$(hc_val ${step}_flush)" = 0 ] && [ "$(hc_val ${step}_ready_ms)" -ge 1000 ] && [ "$(hc_val ${step}_result)" = "$want" ]'
    done
    wait "$hc_pid"
    rc=$?
    check "held_s: the program ends cleanly (rc $rc)" '[ $rc -eq 0 ]'
}
