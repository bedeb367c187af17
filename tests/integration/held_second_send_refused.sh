# held_second_send_refused.sh - a command in progress is in progress while held: libpq's own rule
# refuses a second one
it_held_second_send_refused() {
    mark
    hc_hold held_2s held_2s 3000
    hc_run held_2s double_send DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_2s: a second PQsendQuery while the first is held returns 0, another command in progress ($(hc_val second_send) $(grep -o 'second_error=.*' "$hc_out"))" \
        '[ "$(hc_val second_send)" = 0 ] && grep -q "^second_error=\"another command is already in progress" "$hc_out"'
    check "held_2s: the first completes ($(hc_val result)), the next runs ($(hc_val next); rc $rc); the second never reached the server (probes: $(probes held_2s))" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(probes held_2s)" = 2 ]'
}
