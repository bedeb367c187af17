# stall_outlives_the_keys.sh - Redis stopped for longer than the pool's keys live (issue 29, chaos
# seed 10: lease 2 s, a 4.1 s stop, then no grant for anyone for 2.2 s). Worker A holds the only
# permit idle inside a transaction (BEGIN; probe; a pause; probe; COMMIT) at a lease of 1 s; Redis
# is stopped (SIGSTOP) for 3.5 s, longer than the pool's keys live (three leases, refreshed once
# half of that has passed), so they expire by Redis' clock, and the renewal A wrote into Redis'
# socket during the stop runs once it resumes, naming a permit Redis lacks and does not remember
# as gone. A's lease ran out during the stop: an expiry (A logs lease_lost and acquires again),
# not data lost. Judged from Redis' own counters: no quarantine, the permit counted expired; and
# at the server: never more than one probe at a time. On the code before: a quarantine ("data
# lost") of Q, in which B, who asks as Redis resumes, waited with nothing running.
echo "# stall_outlives_the_keys: a Redis stop longer than the keys live is no data loss"
sk="PGAPPNAME=sk DBTHROTTLE_POOL=sk DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=1s DBTHROTTLE_REDIS_TIMEOUT=300ms"
sk_stats="dbthrottle:{sk}:q:stats"
mark
rm -f "$work/sk.ready"
wargs="-n 1 -x 5000 -W $work/sk.ready" spawn "$work/sk.a" $sk DBTHROTTLE_LOG="$work/sk.a.log"
sk_a=$spawned
wait_until 10 '[ -e "$work/sk.ready" ]'
sleep 0.5 # a renewal or two: A's renewer holds a connection open into the stop
kill -STOP "$redis_pid"
sleep 3.5
kill -CONT "$redis_pid"
sk_back=$(now_ms)
wargs="-n 1" spawn "$work/sk.b" $sk
sk_b=$spawned
wait "$sk_a" "$sk_b"
wargs=
sk_q=$(rcli HGET "$sk_stats" quarantines)
sk_exp=$(rcli HGET "$sk_stats" expired)
sk_conc=$(max_conc sk)
info "stall_outlives_the_keys: B's longest call $(max_field max_call_ms "$work/sk.b") ms, A's $(max_field max_call_ms "$work/sk.a") ms; workers done $(($(now_ms) - sk_back)) ms after Redis resumed"
check "stall_outlives_the_keys: the late renewal's missing permit was counted expired (expired ${sk_exp:-none})" '[ "${sk_exp:-0}" -ge 1 ]'
check "stall_outlives_the_keys: no quarantine after the stop (quarantines ${sk_q:-none})" '[ -z "$sk_q" ] || [ "$sk_q" -eq 0 ]'
check "stall_outlives_the_keys: A logged its lease lost and acquired again" 'grep -q "event=lease_lost" "$work/sk.a.log" && grep -q "event=reacquire" "$work/sk.a.log"'
check "stall_outlives_the_keys: at most one probe at a time at the server (most seen: $sk_conc), 3 probes ran, all succeeded" '[ "$sk_conc" -eq 1 ] && [ "$(probes sk)" -eq 3 ] && [ "$(sum_field ok "$work/sk.a" "$work/sk.b")" -eq 2 ] && [ "$(sum_field err "$work/sk.a" "$work/sk.b")" -eq 0 ]'
