# held_exec_after.sh - PQexec while a command is held: libpq reads the earlier command's results
# first (dropping them)
it_held_exec_after() {
    mark
    hc_hold held_x held_x 3000
    hc_run held_x exec_after DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_x: PQexec after a held PQsendQuery: its own result ($(hc_val exec)), not busy after ($(hc_val busy_end)); rc $rc" \
        '[ $rc -eq 0 ] && [ "$(hc_val exec)" = TUPLES_OK:exec ] && [ "$(hc_val busy_end)" = 0 ]'
    check "held_x: the held command ran once at the server, alone (probes: $(probes held_x); max at once $(max_conc held_x))" \
        '[ "$(probes held_x)" = 2 ] && [ "$(max_conc held_x)" = 1 ]'
}
