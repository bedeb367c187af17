# held_nonblocking.sh - nonblocking mode (PQsetnonblocking 1): the same
it_held_nonblocking() {
    mark
    hc_hold held_nb held_nb 3000
    hc_run held_nb nonblocking DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_nb: in nonblocking mode, the result once the holder is done ($(hc_val ready_ms) ms: $(hc_val result)), still nonblocking (rc $rc; probes $(probes held_nb))" \
        '[ $rc -eq 0 ] && [ "$(hc_val nonblocking)" = 1 ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ] && [ "$(hc_ms ready_ms)" -ge 1000 ] && [ "$(hc_val still_nonblocking)" = 1 ] && [ "$(probes held_nb)" = 2 ]'
}
