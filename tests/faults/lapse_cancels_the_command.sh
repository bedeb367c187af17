# lapse_cancels_the_command.sh - closed mode: a command that runs past its lease while Redis is
# unreachable is cancelled at the server before Redis can grant its permit to another (issue 29,
# found by make chaos). Limit 1, lease 2 s, DBTHROTTLE_REDIS_TIMEOUT=300ms: holder A runs a 12 s
# probe, waiter B queues behind it; 3 s later (A renewed: not cancelled while Redis answers)
# Redis is stopped (SIGSTOP) for 4 s, so A's renewals fail and its lease lapses in Redis (reaped
# when Redis answers again); newcomer C asks right after Redis is back.
#   (closed) A's command is cancelled (57014) before any other probe starts at the server: never
#            two probes at once, and A logged lease_lost saying its command is cancelled;
#   (open)   nothing is cancelled: open mode may exceed the limit while Redis is unreachable, and
#            A's probe runs to its end.
# Judged at the server: the counter's most at once, and the order of A's cancel (its backend's
# error line) against the next probe's start in the server log. docs/design.md ("Why it is
# safe") states the bound.
echo "# lapse_cancels_the_command: a command running past its lease while Redis is stopped"
# lc_line PATTERN: the server log's line number (since the mark) of the first line matching
# PATTERN (0: none).
lc_line() {
    tail -n +"$((log_mark + 1))" "$work/pg/server.log" | grep -n -m1 -e "$1" | cut -d: -f1 | awk '{ print $1 + 0 } END { if (NR == 0) print 0 }'
}
for mode in closed open; do
    lc="PGAPPNAME=lc_$mode DBTHROTTLE_POOL=lapse_$mode DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=2s DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_ON_REDIS_ERROR=$mode"
    mark
    # Closed: long enough that without the cancel it would still run when C is granted; open: that
    # it outlasts the stall.
    lc_ms=12000
    [ $mode = open ] && lc_ms=8000
    # Under FAULT_EXIT_NOW (the ASan run) A ends with _exit: the library's exit, which waits for
    # a cancel's thread to log how it went, is skipped. A then stays until its log has the
    # lapse_cancel line (at most 5 s after its probe's end) before it exits.
    lc_end= lc_toucher=
    [ -z "${FAULT_EXIT_NOW:-}" ] || lc_end="-E $work/lc.a.$mode.end"
    wargs="-n 1 -s $lc_ms $lc_end" spawn "$work/lc.a.$mode" $lc DBTHROTTLE_LOG="$work/lc.a.$mode.log"
    a=$spawned
    [ -z "$lc_end" ] || (wait_until 30 '[ -s "$work/lc.a.$mode" ]' &&
        wait_until 5 'grep -q "event=lapse_cancel" "$work/lc.a.$mode.log"'
        touch "$work/lc.a.$mode.end") &
    lc_toucher=$!
    wait_until 10 '[ "$(probes lc_$mode)" -ge 1 ]'
    # A's backend, by the pid in the default log_line_prefix ("%m [%p] ") of its probe's line.
    a_be=$(tail -n +"$((log_mark + 1))" "$work/pg/server.log" | grep -m1 "dbt_conc app=lc_$mode n=" | sed 's/^[^[]*\[\([0-9]*\)\].*/\1/')
    wargs="-n 1 -s 500" spawn "$work/lc.b.$mode" $lc
    b=$spawned
    wait_until 5 '[ "$(live_waiters q "dbthrottle:{lapse_$mode}")" -ge 1 ]'
    # First 1.5 leases with Redis up: renewed, A's probe must not be cancelled meanwhile.
    sleep 3
    healthy=$(lc_line "\[$a_be\] ERROR:")
    kill -STOP "$redis_pid"
    sleep 4
    kill -CONT "$redis_pid"
    wargs="-n 1 -s 500" spawn "$work/lc.c.$mode" $lc
    c=$spawned
    wait "$a" "$b" "$c" $lc_toucher
    conc=$(max_conc lc_$mode)
    n=$(probes lc_$mode)
    a_err=$(sum_field err "$work/lc.a.$mode")
    cancelled=$(lc_line "\[$a_be\] ERROR:  canceling statement due to user request")
    # The second probe's start: the first dbt_conc line of another backend.
    second=$(tail -n +"$((log_mark + 1))" "$work/pg/server.log" | grep -n "dbt_conc app=lc_$mode n=" | grep -v "\[$a_be\]" | head -1 | cut -d: -f1)
    if [ $mode = closed ]; then
        # How long before the next probe began A's cancel reached its backend, by the server's
        # own clock (the "%m" times of the two lines; -1: either is missing).
        ahead=$(tail -n +"$((log_mark + 1))" "$work/pg/server.log" | awk -v c="${cancelled:-0}" -v n="${second:-0}" '
            function ms(l,  t) { split(l, f, " "); split(f[2], t, "[:.]"); return ((t[1] * 60 + t[2]) * 60 + t[3]) * 1000 + t[4] }
            NR == c { a = ms($0) } NR == n { b = ms($0) } END { print (a && b) ? b - a : -1 }')
        info "lapse_cancels_the_command (closed): A's cancel reached the server $ahead ms before the next probe began"
        # And by A's own log: how long after its last accepted renewal it cancelled, and how long
        # the cancel took (lease_lost to lapse_cancel, which is logged once PQcancel returned).
        info "lapse_cancels_the_command (closed): A: $(grep -o "not renewed for [0-9]* ms of a [0-9]* ms lease" "$work/lc.a.$mode.log" | head -1); the cancel took $(awk '
            function us(l,  t) { match(l, /T[0-9:.]*Z/); split(substr(l, RSTART + 1, RLENGTH - 2), t, "[:.]"); return ((t[1] * 60 + t[2]) * 60 + t[3]) * 1000000 + t[4] }
            /event=lease_lost/ && !a { a = us($0) } /event=lapse_cancel/ && !b { b = us($0) } END { print (a && b) ? int((b - a) / 1000) : -1 }' "$work/lc.a.$mode.log") ms"
        check "lapse_cancels_the_command (closed): while Redis answered, A's probe ran on past its lease (3 s, no error at the server)" '[ "$healthy" -eq 0 ]'
        check "lapse_cancels_the_command (closed): never two probes at once at the server (most seen: $conc), and others ran after A ($n probes)" '[ "$conc" -eq 1 ] && [ "$n" -ge 2 ]'
        check "lapse_cancels_the_command (closed): A's command ended with the server's cancel (line $cancelled since the mark) before another probe started (line ${second:-none})" '[ "$cancelled" -gt 0 ] && [ -n "$second" ] && [ "$cancelled" -lt "$second" ]'
        check "lapse_cancels_the_command (closed): A's program saw the error (SQLSTATE 57014)" '[ "$a_err" -eq 1 ] && grep -q "codes=57014:1" "$work/lc.a.$mode"'
        check "lapse_cancels_the_command (closed): A logged lease_lost saying its command is cancelled, and the cancel" 'grep "level=error event=lease_lost" "$work/lc.a.$mode.log" | grep -q "its command is cancelled" && grep -q "event=lapse_cancel" "$work/lc.a.$mode.log"'
    else
        check "lapse_cancels_the_command (open): nothing was cancelled: A's probe ran its 8 s out (past Redis' return) and succeeded" '[ "$cancelled" -eq 0 ] && [ "$a_err" -eq 0 ] && [ "$(sum_field ok "$work/lc.a.$mode")" -eq 1 ] && ! grep -q "event=lapse_cancel" "$work/lc.a.$mode.log"'
    fi
done
wargs=
