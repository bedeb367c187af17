# held_cancelled.sh - c. a cancel (PQcancel from another thread) ends the hold with 57014
it_held_cancelled() {
    mark
    hc_hold held_c held_c 4000
    hc_run held_c cancel DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    hc_loop_ran
    check "held_c: PQcancel 300 ms after the send woke the loop before the holder's end ($(hc_val ready_ms) ms): 57014 then NULL ($(hc_val result))" \
        '[ "$(hc_val cancel_sent)" = 1 ] && [ "$(hc_val result)" = "FATAL_ERROR:57014,NULL" ] && [ "$(hc_ms ready_ms)" -lt 3000 ]'
    check "held_c: the status unchanged ($(hc_val tx)); the next command runs ($(hc_val next); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val tx)" = IDLE ] && [ "$(hc_val next)" = TUPLES_OK:next ]'
    check "held_c: the cancelled statement never reached the server (probes: $(probes held_c)); nothing held or queued after" \
        '[ "$(probes held_c)" = 1 ] && [ "$(hc_card held_c queue)" = 0 ] && [ "$(hc_card held_c holders)" = 0 ]'
}
