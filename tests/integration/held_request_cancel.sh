# held_request_cancel.sh - c. the same with PQrequestCancel, from the event loop's own thread
it_held_request_cancel() {
    mark
    hc_hold held_rc held_rc 4000
    hc_run held_rc request_cancel DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_rc: PQrequestCancel 300 ms into the loop ended the hold before the holder's end ($(hc_val ready_ms) ms): 57014 then NULL ($(hc_val result))" \
        '[ "$(hc_val request_cancel)" = 1 ] && [ "$(hc_val result)" = "FATAL_ERROR:57014,NULL" ] && [ "$(hc_ms ready_ms)" -lt 3000 ]'
    check "held_rc: the next command runs ($(hc_val next); rc $rc); the cancelled one never reached the server (probes: $(probes held_rc))" \
        '[ $rc -eq 0 ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(probes held_rc)" = 1 ]'
}
