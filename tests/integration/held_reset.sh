# held_reset.sh - e. PQreset with a held command: never sent; the connection works after the reset
it_held_reset() {
    mark
    hc_hold held_r held_r 3000
    hc_run held_r reset DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_r: PQreset with a held command: the connection works after it ($(hc_val reset_status), $(hc_val next); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val reset_status)" = OK ] && [ "$(hc_val next)" = TUPLES_OK:next ]'
    check "held_r: the held command never reached the server (probes: $(probes held_r)); nothing held or queued after" \
        '[ "$(probes held_r)" = 1 ] && [ "$(hc_card held_r queue)" = 0 ] && [ "$(hc_card held_r holders)" = 0 ]'
}
