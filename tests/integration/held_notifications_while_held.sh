# held_notifications_while_held.sh - a LISTENing connection gets its notifications while its command
# is held
it_held_notifications_while_held() {
    mark
    hc_run held_n notify DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line listen
    hc_hold held_n held_n 3000
    hc_go send
    hc_line send
    psql -qAtX -c "notify held_chan, 'while held'" >/dev/null
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_n: the NOTIFY reached the loop while the command was held ($(hc_val notifies) at $(hc_val first_notify_ms) ms; result at $(hc_val ready_ms) ms: $(hc_val result); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val listen)" = COMMAND_OK ] && [ "$(hc_ms notifies)" -ge 1 ] && [ "$(hc_ms first_notify_ms)" -ge 0 ] && [ "$(hc_ms first_notify_ms)" -lt "$(hc_ms ready_ms)" ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ]'
}
