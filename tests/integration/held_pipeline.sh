# held_pipeline.sh - d. pipeline mode: three commands and a sync, all held, sent in order once the
# holder is done
it_held_pipeline() {
    mark
    hc_hold held_p held_p 3000
    hc_run held_p pipeline DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line pipeline
    hc_go next
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    check "held_p: 3 PQsendQueryParams and PQpipelineSync return 1 at once ($(hc_said))" \
        '[ "$(hc_val batch_sent)" = 1 ] && [ "$(hc_ms send_ms)" -lt 1000 ] && [ "$(hc_val busy)" = 1 ] && [ "$(hc_val flush)" = 0 ]'
    hc_loop_ran
    check "held_p: then the results in order, each followed by NULL, then the sync" \
        '[ "$(hc_val batch_r1)" = TUPLES_OK:1,NULL ] && [ "$(hc_val batch_r2)" = TUPLES_OK:2,NULL ] && [ "$(hc_val batch_r3)" = TUPLES_OK:3,NULL ] && [ "$(hc_val batch_sync)" = PIPELINE_SYNC ]'
    check "held_p: the first ran at the server once, alone, after the holder (probes: $(probes held_p))" \
        '[ "$(probes held_p)" = 2 ]'
    check "held_p: the next batch and leaving pipeline mode work (rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next_r3)" = TUPLES_OK:3,NULL ] && [ "$(hc_val next_sync)" = PIPELINE_SYNC ] && [ "$(hc_val exit_pipeline)" = 1 ]'
}
