# held_pipeline_refused.sh - d. pipeline mode, refused at the timeout: 53300 first, then the others,
# then the sync
it_held_pipeline_refused() {
    mark
    hc_hold held_pr held_pr 6000
    hc_run held_pr pipeline DBTHROTTLE_WAIT_TIMEOUT=1500ms
    hc_line pipeline
    queue=$(hc_card held_pr queue)
    wait "$hc_holder"
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_pr: the pipeline's calls return 1 at once ($(hc_said))" \
        '[ "$(hc_val batch_sent)" = 1 ] && [ "$(hc_ms send_ms)" -lt 1000 ]'
    check "held_pr: refused at the timeout: 53300 first, the two others not run, each then NULL, then the sync" \
        '[ "$(hc_val batch_r1)" = FATAL_ERROR:53300,NULL ] && hc_not_run "$(hc_val batch_r2)" && hc_not_run "$(hc_val batch_r3)" && [ "$(hc_val batch_sync)" = PIPELINE_SYNC ]'
    check "held_pr: nothing queued after the refusal ($queue); none of it reached the server (probes: $(probes held_pr))" \
        '[ "$queue" = 0 ] && [ "$(probes held_pr)" = 1 ]'
    check "held_pr: the connection is usable after: the next batch runs (rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next_r1)" = TUPLES_OK:1,NULL ] && [ "$(hc_val next_r3)" = TUPLES_OK:3,NULL ] && [ "$(hc_val next_sync)" = PIPELINE_SYNC ]'
}
