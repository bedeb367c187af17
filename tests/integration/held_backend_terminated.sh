# held_backend_terminated.sh - the server ends the session of a connection whose command is held:
# the loop learns it at once (not at the grant), the place in the queue goes, and nothing is held or
# sent
it_held_backend_terminated() {
    mark
    hc_hold held_t held_t 4000
    hc_run held_t wait DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line send
    killed=$(psql -qAtX -c "select count(pg_terminate_backend(pid)) from pg_stat_activity where application_name = 'held_t' and state = 'idle'")
    hc_line conn
    wait_until 5 '[ "$(hc_card held_t queue)" = 0 ]'
    queue=$(hc_card held_t queue)
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    check "held_t: its backend terminated while held ($killed): the loop woke before the holder's end ($(hc_val ready_ms) ms), with the failure ($(hc_val result), consume_failed $(hc_val consume_failed), $(hc_val conn))" \
        '[ "$killed" = 1 ] && [ "$(hc_ms ready_ms)" -lt 3000 ] && [ "$(hc_val conn)" = BAD ] && { [ "$(hc_val consume_failed)" = 1 ] || [ "${hc_v=$(hc_val result)}" != "${hc_v#FATAL_ERROR}" ]; }'
    after=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=held_t DBTHROTTLE_WAIT_TIMEOUT=5s psql -qAtX -c "select 'free'" 2>&1)
    check "held_t: its place left the queue ($queue), the permit is free after the holder ($after), nothing reached the server (probes $(probes held_t); rc $rc)" \
        '[ "$queue" = 0 ] && [ "$after" = free ] && [ "$(probes held_t)" = 1 ]'
}
