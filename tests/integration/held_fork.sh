# held_fork.sh - f. fork with a held command: the child never sends it, the parent's completes
it_held_fork() {
    mark
    hc_hold held_k held_k 3000
    hc_run held_k fork DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_k: the parent's held command completes after the fork ($(hc_val result)), the child ran its own command and exits 0 ($(hc_val child_exit)), the next command runs (rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ] && [ "$(hc_val child_exit)" = 0 ] && [ "$(hc_val next)" = TUPLES_OK:next ]'
    check "held_k: at the server it ran once, not also from the child (probes: $(probes held_k), the holder's and the parent's)" \
        '[ "$(probes held_k)" = 2 ]'
}
