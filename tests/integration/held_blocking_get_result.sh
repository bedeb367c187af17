# held_blocking_get_result.sh - a blocking PQgetResult on a held command waits for it to be sent (or
# refused), then as usual
it_held_blocking_get_result() {
    mark
    hc_hold held_g held_g 3000
    hc_run held_g blocking DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_go next
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_g: PQgetResult blocked until the holder was done ($(hc_val blocked_ms) ms), then the result and NULL ($(hc_val result)); next: $(hc_val next) (rc $rc); probes $(probes held_g)" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ] && [ "$(hc_ms blocked_ms)" -ge 1000 ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(probes held_g)" = 2 ]'
    mark
    hc_hold held_g2 held_g2 6000
    hc_run held_g2 blocking DBTHROTTLE_WAIT_TIMEOUT=1500ms
    hc_line result
    wait "$hc_holder"
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_g2: refused at the 1.5 s timeout, PQgetResult returned then ($(hc_val blocked_ms) ms): 53300 and NULL ($(hc_val result)); next: $(hc_val next) (rc $rc); probes $(probes held_g2)" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = FATAL_ERROR:53300,NULL ] && [ "$(hc_ms blocked_ms)" -ge 1000 ] && [ "$(hc_ms blocked_ms)" -le 4500 ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(probes held_g2)" = 1 ]'
}
