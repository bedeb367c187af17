# paused_workers_cost_only_themselves.sh - a paused process costs only itself (issue 29). 12
# workers at DBTHROTTLE_MAX_QUERIES=2, lease 1 s, 20 ms probes; for PW_SECONDS (20) a random
# worker is SIGSTOPped every 0.4-0.7 s for 1.5-4 s (longer than two leases: Redis reaps what it
# held or queued and forgets it), several at once. No data is lost in Redis, so the pool must
# never enter a quarantine (Redis' own counter, q:stats quarantines), and the server never runs
# more than 2 probes at once. PW_ENV: more settings for the workers (DBTHROTTLE_HOST_SHARE=off).
echo "# paused_workers_cost_only_themselves: workers SIGSTOPped for longer than two leases"
mark
wargs="-s 20"
pw_pool=pw$$
pw_env="PGAPPNAME=pw DBTHROTTLE_POOL=$pw_pool DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LEASE=1s ${PW_ENV:-}"
pw_n=12
i=0
while [ $i -lt $pw_n ]; do
    spawn "$work/pw.out.$i" $pw_env
    eval "pw_pid$i=$spawned pw_until$i=0"
    i=$((i + 1))
done
pw_stat() { rcli --raw hget "dbthrottle:{$pw_pool}:q:stats" "$1"; }
sleep 1
pw_t0=$(now_ms)
pw_end=$((pw_t0 + ${PW_SECONDS:-20} * 1000))
pw_stops=0
pw_next=$pw_t0
while :; do
    now=$(now_ms)
    [ "$now" -lt "$pw_end" ] || break
    i=0
    while [ $i -lt $pw_n ]; do # resume the stopped whose time is up
        eval "u=\$pw_until$i p=\$pw_pid$i"
        if [ "$u" -ne 0 ] && [ "$now" -ge "$u" ]; then
            kill -CONT "$p" 2>/dev/null
            eval "pw_until$i=0"
        fi
        i=$((i + 1))
    done
    if [ "$now" -ge "$pw_next" ]; then
        i=$(rand $pw_n)
        eval "u=\$pw_until$i p=\$pw_pid$i"
        if [ "$u" -eq 0 ]; then
            kill -STOP "$p" 2>/dev/null
            pw_stops=$((pw_stops + 1))
            eval "pw_until$i=$((now + 1500 + $(rand 2500)))"
        fi
        pw_next=$((now + 400 + $(rand 300)))
    fi
    sleep 0.05
done
i=0
while [ $i -lt $pw_n ]; do eval "kill -CONT \$pw_pid$i" 2>/dev/null; i=$((i + 1)); done
sleep 1
pw_probes=$(probes pw)
pw_q=$(pw_stat quarantines)
pw_conc=$(max_conc pw)
# The longest time between two probes' starts at the server (its log's clock), for the report:
# not bounded here, as paused holders and paused waiters granted in turn may each keep a permit
# for a lease and more (a lease after the grant, plus up to a renewal period until reaped).
pw_gap=$(tail -n +"$((log_mark + 1))" "$work/pg/server.log" | awk '/dbt_conc app=pw n=/ {
    split($2, t, ":"); s = t[1] * 3600 + t[2] * 60 + t[3]
    if (seen && s - last > gap) gap = s - last
    last = s; seen = 1 } END { printf "%d", gap * 1000 }')
i=0
while [ $i -lt $pw_n ]; do eval "kill -TERM \$pw_pid$i" 2>/dev/null; i=$((i + 1)); done
wait_workers
info "$pw_stops SIGSTOPs in ${PW_SECONDS:-20} s; $pw_probes probes ran ($((pw_probes / (${PW_SECONDS:-20} + 1)))/s); longest time without a probe starting: $pw_gap ms; quarantines in Redis: ${pw_q:-0}; era: $(rcli --raw get "dbthrottle:{$pw_pool}:q:era")"
check "paused_workers_cost_only_themselves: no quarantine (Redis' count: ${pw_q:-0})" '[ "${pw_q:-0}" -eq 0 ]'
check "paused_workers_cost_only_themselves: at most 2 probes ran at once at the server (most seen: $pw_conc)" '[ "$pw_conc" -le 2 ]'
rcli flushall >/dev/null
wargs=
