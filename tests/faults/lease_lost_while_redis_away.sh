# lease_lost_while_redis_away.sh - a lease that cannot be renewed. Worker A holds the only permit idle inside a transaction
# (BEGIN; probe; a pause; probe; COMMIT). Then
#   (a) Redis stalls (SIGSTOP) for 1.5 leases: A cannot renew; when Redis is back, B asks and gets
#       the permit (A's lease ran out by Redis' clock);
#   (b) Redis restarts empty: A's permit is gone from Redis at once; B asks after one renewal
#       period.
# Stalled, A must log the loss as an error and its next statement must queue behind B, never run
# beside it. Restarted, A's lease has not run out: its renewal re-asserts the permit during the
# quarantine the restart starts (docs/design.md, "Failover and data loss"), A keeps it and B
# queues behind A. Either way the server sees at most one probe at a time. docs/operations.md
# states the bound.
echo "# lease_lost_while_redis_away: a lease lost while Redis is stalled or restarted"
for how in stall restart; do
    # (restart) A's re-assertion must reach Redis within the quarantine Q = lease/3 + timeout +
    # 1 s: its first renewal after the kill fails within lease/3, the outage backoff then skips
    # renewals for 1 s, so its margin is about the Redis timeout. 300 ms of it was not enough for
    # a TSan worker beside make test's other lanes (B ran beside A once); lease 3 s and timeout
    # 1 s leave it 1 s.
    c4="PGAPPNAME=c4 DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=1s DBTHROTTLE_REDIS_TIMEOUT=300ms"
    [ $how = restart ] && c4="PGAPPNAME=c4 DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=3s DBTHROTTLE_REDIS_TIMEOUT=1s"
    mark
    rm -f "$work/c4.ready"
    # (stall) B must start and queue before A's pause ends: 2.5 s left 1 s after the stall, which
    # B took longer to use under TSan beside a busy loop (A's next statement waited 100 ms: B was
    # not queued yet). A pauses 4 s there, and B holds as long, past the end of A's pause.
    pause_ms=2500
    [ $how = stall ] && pause_ms=4000
    wargs="-n 1 -x $pause_ms -W $work/c4.ready" spawn "$work/c4.a.$how" $c4 DBTHROTTLE_LOG="$work/c4.a.$how.log"
    a=$spawned
    wait_until 10 '[ -e "$work/c4.ready" ]'
    if [ $how = stall ]; then
        kill -STOP "$redis_pid"
        sleep 1.5
        kill -CONT "$redis_pid"
    else
        redis_kill
        rm -f "$work/redis/dump.rdb"
        redis_start
        sleep 1.1 # one renewal period (lease/3) and a little
    fi
    wargs="-n 1 -s $pause_ms" spawn "$work/c4.b.$how" $c4 # holds past the end of A's pause
    b=$spawned
    wait "$a" "$b"
    conc=$(max_conc c4)
    a_ms=$(max_field max_call_ms "$work/c4.a.$how")
    check "lease_lost_while_redis_away ($how): at most one probe at a time at the server (most seen: $conc), 3 probes ran" '[ "$conc" -eq 1 ] && [ "$(probes c4)" -eq 3 ]'
    if [ $how = stall ]; then
        check "lease_lost_while_redis_away ($how): A logged the lost lease as an error" 'grep -q "level=error event=lease_lost" "$work/c4.a.$how.log"'
        # Its renewals failed in time while A ran on: Redis' doing, not a stall of A's own.
        check "lease_lost_while_redis_away ($how): the lost lease blamed Redis' failed renewals, not a stop of A" 'grep "event=lease_lost" "$work/c4.a.$how.log" | grep -q "renewals failed" && ! grep "event=lease_lost" "$work/c4.a.$how.log" | grep -q "was stopped"'
        check "lease_lost_while_redis_away ($how): A's next statement queued behind B ($a_ms ms) and A and B succeeded" '[ "$a_ms" -ge 300 ] && [ "$(sum_field ok "$work/c4.a.$how" "$work/c4.b.$how")" -eq 2 ] && [ "$(sum_field err "$work/c4.a.$how" "$work/c4.b.$how")" -eq 0 ]'
        check "lease_lost_while_redis_away ($how): it said it would acquire again" 'grep -q "event=reacquire" "$work/c4.a.$how.log"'
    else
        b_ms=$(max_field max_call_ms "$work/c4.b.$how")
        check "lease_lost_while_redis_away ($how): A re-asserted its permit in a quarantine, lost nothing, and B queued behind A ($b_ms ms) and A and B succeeded" 'grep -q "event=quarantine" "$work/c4.a.$how.log" && ! grep -q "event=lease_lost" "$work/c4.a.$how.log" && [ "$b_ms" -ge 300 ] && [ "$(sum_field ok "$work/c4.a.$how" "$work/c4.b.$how")" -eq 2 ] && [ "$(sum_field err "$work/c4.a.$how" "$work/c4.b.$how")" -eq 0 ]'
    fi
done
wargs=
