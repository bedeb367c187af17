# held_two_connections_one_loop.sh - one thread, two connections, limit 1 (pgbench -j's shape; a
# deadlock when the send waited)
it_held_two_connections_one_loop() {
    mark
    hc_run held_two two DBTHROTTLE_WAIT_TIMEOUT=10s
    wait "$hc_pid"
    rc=$?
    check "held_two: the second connection's PQsendQuery returns 1 at once while the first holds the permit ($(hc_said))" \
        '[ "$(hc_val first_send)" = 1 ] && [ "$(hc_val second_send)" = 1 ] && [ "$(hc_ms second_send_ms)" -lt 1000 ] && [ "$(hc_val second_busy)" = 1 ]'
    check "held_two: both complete in the one loop, each alone at the server, the second after the first (rc $rc; probes $(probes held_two))" \
        '[ $rc -eq 0 ] && [ "$(hc_val first_result)" = TUPLES_OK:1,NULL ] && [ "$(hc_val second_result)" = TUPLES_OK:1,NULL ] && [ "$(hc_ms second_done_ms)" -ge "$(hc_ms first_done_ms)" ] && [ "$(probes held_two)" = 2 ]'
    hc_loop_ran
}
