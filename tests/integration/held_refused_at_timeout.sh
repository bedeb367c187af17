# held_refused_at_timeout.sh - b. refused at the wait timeout: the loop wakes, 53300 then NULL, the
# connection usable after
it_held_refused_at_timeout() {
    mark
    hc_hold held_b held_b 6000
    hc_run held_b refuse DBTHROTTLE_WAIT_TIMEOUT=1500ms
    hc_line tx
    queue=$(hc_card held_b queue)
    holders=$(hc_card held_b holders)
    hc_sent_at_once
    hc_loop_ran
    check "held_b: poll() woke at the 1.5 s wait timeout, not at the holder's end at 6 s (after $(hc_val ready_ms) ms)" \
        '[ "$(hc_ms ready_ms)" -ge 1400 ] && [ "$(hc_ms ready_ms)" -le 4500 ]'
    check "held_b: PQgetResult gives PGRES_FATAL_ERROR with SQLSTATE 53300 and the dbthrottle message, then NULL ($(hc_val result))" \
        '[ "$(hc_val result)" = "FATAL_ERROR:53300,NULL" ] && grep -q "^result_error=\"dbthrottle: no query permit" "$hc_out"'
    check "held_b: the transaction status is unchanged ($(hc_val tx))" '[ "$(hc_val tx)" = IDLE ]'
    check "held_b: after the refusal, Redis has it neither queued nor holding (queue $queue, holders $holders: the holder's)" \
        '[ "$queue" = 0 ] && [ "$holders" = 1 ]'
    wait "$hc_holder"
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_b: the connection is usable for the next command ($(hc_val next); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next)" = "TUPLES_OK:next" ]'
    check "held_b: the refused statement never reached the server (probes: $(probes held_b), the holder's)" \
        '[ "$(probes held_b)" = 1 ]'
    cancelled=$(rcli hget "dbthrottle:{held_b}:q:stats" cancelled)
    check "held_b: Redis counts the refused wait as cancelled ($cancelled), and nothing is held or queued in the end" \
        '[ "$cancelled" = 1 ] && [ "$(hc_card held_b queue)" = 0 ] && [ "$(hc_card held_b holders)" = 0 ]'
}
