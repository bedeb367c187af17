# held_pipeline_abort_then_more.sh - a pipeline whose refused stand-in is answered as aborted: the
# server's error, then aborted, and held commands run afterwards (a finding of the held commands'
# review)
it_held_pipeline_abort_then_more() {
    mark
    hc_hold held_pa held_pa 2000
    hc_run held_pa pipeline_abort DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line exit
    wait "$hc_holder"
    mark
    hc_hold held_pa held_pa 2000
    hc_go again
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    check "held_pa: a held pipeline's error and the command libpq refused once sent read as the server's error then aborted ($(hc_val r1) $(hc_val r2) $(hc_val sync)), pipeline left ($(hc_val exit))" \
        '[ "$(hc_val r1)" = FATAL_ERROR:22012,NULL ] && [ "$(hc_val exit)" = 1 ]'
    check "held_pa: afterwards a held command (sent in $(hc_val again_send_ms) ms, busy $(hc_val again_busy): $(hc_val again)) and the next ($(hc_val next_send) $(hc_val next)) run (rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val again_busy)" = 1 ] && [ "$(hc_val again)" = TUPLES_OK:1,NULL ] && [ "$(hc_val next_send)" = 1 ] && [ "$(hc_val next)" = TUPLES_OK:next,NULL ]'
}
