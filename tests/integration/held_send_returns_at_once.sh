# held_send_returns_at_once.sh - a. the permit held elsewhere: the send returns at once, the result
# comes once the holder is done
it_held_send_returns_at_once() {
    mark
    hc_hold held_a held_a 3000
    hc_run held_a wait DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    hc_loop_ran
    check "held_a: the socket became readable when the holder ended ($(hc_val ready_ms) ms after the send): the real result, then NULL ($(hc_val result); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = "TUPLES_OK:1,NULL" ] && [ "$(hc_ms ready_ms)" -ge 1000 ]'
    check "held_a: at the server, the held statement ran once, after the holder's ended (probes: $(probes held_a); it saw itself alone: $(hc_val result))" \
        '[ "$(probes held_a)" = 2 ] && [ "$(hc_val result)" = "TUPLES_OK:1,NULL" ]'
}
