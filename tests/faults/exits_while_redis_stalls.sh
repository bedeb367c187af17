# exits_while_redis_stalls.sh - a process that ends while Redis answers nothing in time (stalled, or
# slower than DBTHROTTLE_REDIS_TIMEOUT) leaves nothing held once Redis reads again. make chaos saw
# the limit unused for 1.4 s after a slow Redis ended: pgbench had exited in it, its releases and
# withdrawals owed (the outage had deferred them), and its exit could not send them, as every new
# connection first waits for the answer to its INFO and script loads. Limit 1, lease 9 s,
# DBTHROTTLE_REDIS_TIMEOUT=200ms: holder H runs one 4 s probe; 0.3 s into it Redis is stopped
# (SIGSTOP), so H's renewal (3 s after its grant) fails and its release is owed; H exits while
# Redis is still stopped, which resumes (SIGCONT) 0.3 s after. From outside: H's permit leaves
# Redis' holders within 1 s of Redis' return (the old code: its lease, 5 s later or more), and
# newcomer N, started 0.1 s after the return, runs its probe within 1.5 s of it; one probe at a
# time. docs/design.md ("Owed releases") states the bound.
echo "# exits_while_redis_stalls: a process exits with its release owed while Redis is stopped"
ew="PGAPPNAME=ew DBTHROTTLE_POOL=exitstall DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=9s DBTHROTTLE_REDIS_TIMEOUT=200ms"
ew_key="dbthrottle:{exitstall}:q"
# ew_held ID: whether ID holds a permit by Redis' own clock (its lease not run out).
ew_held() {
    [ "$(rcli --raw eval "local t = redis.call('TIME') local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
        return (s and tonumber(s) >= t[1] * 1000 + math.floor(t[2] / 1000)) and 1 or 0" 1 "$ew_key:holders" "$1")" = 1 ]
}
mark
wargs="-n 1 -s 4000" spawn "$work/ew.h" $ew DBTHROTTLE_LOG="$work/ew.h.log" DBTHROTTLE_LOG_LEVEL=debug
ew_h=$spawned
wait_until 10 '[ "$(rcli zcard "$ew_key:holders")" -ge 1 ]'
ew_id=$(rcli --raw zrange "$ew_key:holders" 0 0)
sleep 0.3
kill -STOP "$redis_pid"
wait "$ew_h"
t_exit=$(now_ms)
sleep 0.3
kill -CONT "$redis_pid"
t_back=$(now_ms)
sleep 0.1
wargs="-n 1 -s 100" spawn "$work/ew.n" $ew
ew_n=$spawned
ew_gone=-1
wait_until 8 '! ew_held "$ew_id"' && ew_gone=$waited_ms
wait "$ew_n"
ew_n_ms=$(max_field max_call_ms "$work/ew.n" | awk '{ printf "%d", $1 }')
info "exits_while_redis_stalls: H exited $((t_back - t_exit)) ms before Redis was back; its permit left Redis $ew_gone ms after that; N's probe call took $ew_n_ms ms"
grep -q "event=redis_error" "$work/ew.h.log" || info "exits_while_redis_stalls: H met no Redis error (its renewal came late): its release was not owed"
info "exits_while_redis_stalls: H's exit wrote blind: $(grep -o "event=owed_written_blind.* ops=[0-9]*" "$work/ew.h.log" || echo nothing)"
check "exits_while_redis_stalls: H's permit left Redis' holders within 1 s of Redis' return ($ew_gone ms)" \
    '[ "$ew_gone" -ge 0 ] && [ "$ew_gone" -le 1000 ]'
check "exits_while_redis_stalls: N, started 0.1 s after it, ran its probe within 1.4 s ($ew_n_ms ms)" \
    '[ "$(sum_field ok "$work/ew.n")" -eq 1 ] && [ "$ew_n_ms" -le 1400 ]'
ew_conc=$(max_conc ew)
check "exits_while_redis_stalls: one probe at a time at the server (most seen: $ew_conc); both ran" \
    '[ "$ew_conc" -eq 1 ] && [ "$(probes ew)" -eq 2 ] && [ "$(sum_field ok "$work/ew.h")" -eq 1 ]'
check "exits_while_redis_stalls: nothing left in Redis" 'nothing_left q "dbthrottle:{exitstall}" 2'
wargs=
