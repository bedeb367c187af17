# held_pipeline_finish.sh - PQfinish in pipeline mode with three held commands and a sync
it_held_pipeline_finish() {
    mark
    hc_hold held_pf held_pf 3000
    hc_run held_pf pipeline_finish DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line finished
    wait_until 10 '[ "$(hc_card held_pf queue)" = 0 ]'
    check "held_pf: PQfinish of a pipeline of held commands withdrew them ($(hc_said); queue $(hc_card held_pf queue))" \
        '[ "$(hc_val batch_sent)" = 1 ] && [ "$(hc_ms send_ms)" -lt 1000 ] && [ "$(hc_card held_pf queue)" = 0 ]'
    wait "$hc_holder"
    after=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=held_pf DBTHROTTLE_WAIT_TIMEOUT=5s psql -qAtX -c "select 'free'" 2>&1)
    hc_go exit
    wait "$hc_pid"
    rc=$?
    check "held_pf: the permit is free after the holder ($after), the program lives on (rc $rc), none reached the server (probes $(probes held_pf))" \
        '[ "$after" = free ] && [ $rc -eq 0 ] && [ "$(hc_val alive)" = 1 ] && [ "$(probes held_pf)" = 1 ]'
}
