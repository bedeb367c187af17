# held_threads_pass_permits.sh - 16 threads of one process at a limit of 4, each with a connection
# and an event loop of its own, 8 probes each (pgbench -j's shape, as held_sent_by_the_releasing_thread
# runs it, in held_client: a program that make check-tsan builds with ThreadSanitizer, which
# pgbench cannot take): nearly every command is held and its permit given back by another thread
# of the process; all ran, never more than 4 at once at the server, the limit reached
it_held_threads_pass_permits() {
    mark
    hc_run held_thr threads DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_WAIT_TIMEOUT=60s \
        HELD_THREADS=16 HELD_ROUNDS=8 HELD_SQL="select dbt_probe(30)"
    wait "$hc_pid"
    rc=$?
    check "held_thr: 16 threads x 8 commands at limit 4: all ran ($(hc_said); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val threads_ok)" = 128 ] && [ "$(hc_val threads_bad)" = 0 ]'
    check "held_thr: at the server 128 probes, never more than 4 at once, the limit reached (saw $(max_conc held_thr) at once, $(probes held_thr) probes)" \
        '[ "$(probes held_thr)" = 128 ] && [ "$(max_conc held_thr)" = 4 ]'
    wait_until 10 '[ "$(hc_card held_thr holders)" = 0 ] && [ "$(hc_card held_thr queue)" = 0 ]'
    check "held_thr: nothing held or queued after (holders $(hc_card held_thr holders), queue $(hc_card held_thr queue))" \
        '[ "$(hc_card held_thr holders)" = 0 ] && [ "$(hc_card held_thr queue)" = 0 ]'
}
