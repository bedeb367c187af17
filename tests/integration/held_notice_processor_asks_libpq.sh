# held_notice_processor_asks_libpq.sh - a notice processor that asks libpq about its connection
# while the library reads a held command's results does not hang it (a finding of the held commands'
# review)
it_held_notice_processor_asks_libpq() {
    mark
    hc_hold held_np held_np 2000
    hc_run held_np notice DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    check "held_np: a notice processor asking libpq about its connection during a held command's read does not hang it (rc $rc; $(hc_said))" \
        '[ $rc -eq 0 ] && [ "$(hc_val notices)" = 1 ] && [ "$(hc_val result)" = COMMAND_OK,NULL ] && [ "$(hc_val second)" = TUPLES_OK:1,NULL ] && [ "$(probes held_np)" = 3 ]'
}
