# held_finish.sh - e. PQfinish with a held command: withdrawn, never sent, no permit left behind
it_held_finish() {
    for hc_wrap in "" valgrind; do
        [ "$hc_wrap" = valgrind ] && ! hc_valgrind && continue
        pool=held_f${hc_wrap:+_vg}
        mark
        # valgrind takes seconds to start the program: the holder holds for longer there (10 s
        # was too short beside a busy loop: the program's PQsendQuery alone took 2.7 s, the
        # holder was done before the PQfinish, and the command ran: probes 2)
        hc_hold $pool $pool $([ -n "$hc_wrap" ] && echo 20000 || echo 3000)
        HC_WRAP=${hc_wrap:+valgrind -q --error-exitcode=9 --log-file=$work/hc.valgrind.%p}
        hc_run $pool finish DBTHROTTLE_WAIT_TIMEOUT=30s
        HC_WRAP=
        hc_line finished
        [ -z "$hc_wrap" ] && hc_sent_at_once
        wait_until 10 '[ "$(hc_card $pool queue)" = 0 ]'
        check "$pool: PQfinish withdrew the held command from Redis' queue (queue: $(hc_card $pool queue))" \
            '[ "$(hc_card $pool queue)" = 0 ]'
        wait "$hc_holder"
        # the pool's permit is free once the holder is done: nothing of the finished connection has it
        after=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=$pool DBTHROTTLE_WAIT_TIMEOUT=5s \
            psql -qAtX -c "select 'free'" 2>&1)
        check "$pool: after the holder, the permit is free for another client ($after; holders $(hc_card $pool holders))" \
            '[ "$after" = free ] && [ "$(hc_card $pool holders)" = 0 ]'
        hc_go exit
        wait "$hc_pid"
        rc=$?
        check "$pool: the program lived on and ended cleanly${hc_wrap:+ under valgrind} (rc $rc; $(hc_said); $(cat "$work"/hc.valgrind.* 2>/dev/null | head -5))" \
            '[ $rc -eq 0 ] && [ "$(hc_val alive)" = 1 ]'
        check "$pool: the held command never reached the server (probes: $(probes $pool))" '[ "$(probes $pool)" = 1 ]'
    done
}
