# held_single_row_mode.sh - PQsetSingleRowMode on a held command (psycopg 3's stream()): asked while
# held, the rows then come one by one (a finding of the held commands' review)
it_held_single_row_mode() {
    mark
    hc_hold held_sr held_sr 3000
    hc_run held_sr single_row DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_sr: PQsetSingleRowMode asked while held returns 1 ($(hc_val single_row)) and the rows come one by one ($(hc_val rows); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val single_row)" = 1 ] && [ "$(hc_val rows)" = SINGLE_TUPLE,SINGLE_TUPLE,SINGLE_TUPLE,TUPLES_OK:,NULL ]'
}
