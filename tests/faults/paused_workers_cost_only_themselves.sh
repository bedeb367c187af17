# paused_workers_cost_only_themselves.sh - a paused process costs only itself (issue 29). 12
# workers at DBTHROTTLE_MAX_QUERIES=2, lease 1 s, 20 ms probes; for PW_SECONDS (20) a random
# worker is SIGSTOPped every 0.4-0.7 s for 1.5-4 s (longer than two leases: Redis reaps what it
# held or queued and forgets it), several at once. No data is lost in Redis, so the pool must
# never enter a quarantine (Redis' own counter, q:stats quarantines), and the server never runs
# more than 2 probes at once; and a holder's lost lease does not blame Redis, which answered
# throughout. PW_ENV: more settings for the workers (DBTHROTTLE_HOST_SHARE=off).
echo "# paused_workers_cost_only_themselves: workers SIGSTOPped for longer than two leases"
mark
psql -qAtX -c "ALTER SYSTEM SET log_timezone = 'UTC'" -c "SELECT pg_reload_conf()" >/dev/null
pw_err=$(($(cat "$work/workers.err" 2>/dev/null | wc -l) + 1)) # the workers' log lines from here
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
            # The time before the signal: read after it, on a loaded machine the clock was read
            # after the resumed worker's statement had begun, and its excess was not explained.
            now_ms >>"$work/pw.conts"
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
now_ms >>"$work/pw.conts"
while [ $i -lt $pw_n ]; do eval "kill -CONT \$pw_pid$i" 2>/dev/null; i=$((i + 1)); done
sleep 1
pw_probes=$(probes pw)
pw_q=$(pw_stat quarantines)
pw_conc=$(max_conc pw)
# The one documented excess (docs/design.md, "Why it is safe"): a holder stopped between its grant
# and its statement's start for longer than a lease runs that statement on a permit Redis has
# reaped and granted again. Each probe that saw more than 2 at once must start within
# PW_RESUME_MS of a SIGCONT (every stop here outlasts the lease), one such excess per SIGCONT then;
# listed with the nearest. (The server logs in UTC, as the shell's clock is read.)
pw_over=$(tail -n +"$((log_mark + 1))" "$work/pg/server.log" | awk -v conts="$work/pw.conts" -v slack="${PW_RESUME_MS:-1000}" '
    function epoch_ms(d, t,   y, m, dd, a, yy, mm, days, hms) {
        split(d, a, "-"); y = a[1] + 0; m = a[2] + 0; dd = a[3] + 0
        a[0] = (m <= 2); yy = y - a[0]; mm = m + 12 * a[0] - 3
        days = 365 * yy + int(yy / 4) - int(yy / 100) + int(yy / 400) + int((153 * mm + 2) / 5) + dd - 719469
        split(t, hms, ":")
        return (days * 86400 + hms[1] * 3600 + hms[2] * 60 + hms[3]) * 1000
    }
    BEGIN { while ((getline c < conts) > 0) cont[++nc] = c + 0 }
    /dbt_conc app=pw n=/ {
        n = $0; sub(/.* n=/, "", n)
        if (n + 0 <= 2) next
        t = epoch_ms($1, $2); best = -1; near = 0
        for (i = 1; i <= nc; i++) if (cont[i] <= t + 5) {
            if (best < 0 || t - cont[i] < best) best = t - cont[i]
            if (t - cont[i] <= slack) near++
        }
        printf "%s %s n=%d %s ", $1, $2, n, (n - 2 <= near) ? "resumed" : "UNEXPLAINED"
        printf "(%d SIGCONTs within %d ms before it, the last %.0f ms before)\n", near, slack, best
    }')
[ -z "$pw_over" ] || echo "$pw_over" | sed 's/^/# above the limit: /'
pw_unexplained=$(echo "$pw_over" | grep -c UNEXPLAINED)
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
# Redis answered throughout: a paused holder's lost lease must say so, not blame Redis.
pw_lost=$(tail -n +"$pw_err" "$work/workers.err" | grep -c "event=lease_lost")
pw_blamed=$(tail -n +"$pw_err" "$work/workers.err" | grep "event=lease_lost" | grep -c -e "Redis unreachable\"" -e "renewals failed" -e "Redis has not answered")
pw_paused=$(tail -n +"$pw_err" "$work/workers.err" | grep "event=lease_lost" | grep -c "this process was stopped")
info "lease_lost lines: $pw_lost, $pw_paused of them saying the process was stopped, $pw_blamed blaming Redis"
check "paused_workers_cost_only_themselves: no lost lease blamed on Redis, which answered throughout ($pw_blamed of $pw_lost)" '[ "$pw_blamed" -eq 0 ]'
check "paused_workers_cost_only_themselves: never more than 2 probes at once at the server but just after a stopped holder resumed (most seen: $pw_conc; $(echo "$pw_over" | grep -c .) above 2, $pw_unexplained of them not one per SIGCONT just before)" '[ "$pw_unexplained" -eq 0 ]'
rcli flushall >/dev/null
wargs=
