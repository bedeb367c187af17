# held_many_connections_one_loop.sh - 8 connections in one loop at a limit of 2, 3 probes each, each
# sent once the connection's last result is read: none waits in the call, the loop never stalls, the
# limit holds at the server
it_held_many_connections_one_loop() {
    mark
    hc_run held_many many DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=20s HELD_SQL="select dbt_probe(50)"
    wait "$hc_pid"
    rc=$?
    check "held_many: 8 connections x 3 commands in one loop at limit 2: all ran, no send waited, no stall ($(hc_said); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val many_ok)" = 24 ] && [ "$(hc_val many_bad)" = 0 ] && [ "$(hc_ms longest_send_ms)" -lt 500 ] && [ "$(hc_ms maxgap_ms)" -lt 500 ]'
    check "held_many: at the server 24 probes, never more than 2 at once, the limit reached (saw $(max_conc held_many) at once, $(probes held_many) probes)" \
        '[ "$(probes held_many)" = 24 ] && [ "$(max_conc held_many)" = 2 ]'
}
