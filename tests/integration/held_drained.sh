# held_drained.sh - c. a drain: no grant for the held command (docs/operations.md), which waits
# until its timeout
it_held_drained() {
    mark
    hc_hold held_d held_d 3000
    hc_run held_d refuse DBTHROTTLE_WAIT_TIMEOUT=6s
    hc_line send
    "$top/build/dbthrottle" drain held_d >"$work/hc.drain.out" 2>&1
    drained=$?
    hc_line tx
    wait "$hc_holder"
    hc_sent_at_once
    check "held_d: drained while held (rc $drained): no grant when the holder ended; refused at the 6 s timeout ($(hc_val ready_ms) ms): 53300 then NULL ($(hc_val result))" \
        '[ $drained -eq 0 ] && [ "$(hc_val result)" = "FATAL_ERROR:53300,NULL" ] && [ "$(hc_ms ready_ms)" -ge 5500 ]'
    "$top/build/dbthrottle" resume held_d >/dev/null 2>&1
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_d: resumed, the connection runs the next command ($(hc_val next); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next)" = TUPLES_OK:next ]'
    check "held_d: the refused statement never reached the server (probes: $(probes held_d))" '[ "$(probes held_d)" = 1 ]'
}
