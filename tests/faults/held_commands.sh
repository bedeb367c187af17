# held_commands.sh - faults that end a command held by the library (issue 15: a PQsend* call that
# finds no permit free returns at once, the command held until a permit comes): the process exits
# with a command held (no PQfinish), and Redis goes away while a command is held, in closed mode
# (the wait ends with a 53300 refusal the program's loop wakes for) and in open mode (the command
# runs unthrottled). The program is tests/integration/held_client.c; a throttled psql holds the
# pool's only permit; the counter's probes at the server say which statements ran.
echo "# held_commands: exit with a command held, Redis gone while a command is held"
hd_card() { rcli zcard "dbthrottle:{$1}:q:$2"; } # hd_card POOL holders|queue
# hd_hold POOL MS: a throttled psql holds POOL's only permit for a MS ms probe ($hd_holder), its
# application_name the pool's; returns once Redis has it holding and its probe runs.
hd_hold() {
    env LD_PRELOAD="$preload" DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=$1 PGAPPNAME=$1 \
        DBTHROTTLE_WAIT_TIMEOUT=60s psql -qAtX -c "select dbt_probe($2)" >/dev/null 2>&1 &
    hd_holder=$!
    echo "$hd_holder" >>"$work/pids"
    wait_until 10 "[ \"\$(hd_card $1 holders)\" = 1 ] && [ \"\$(probes $1)\" = 1 ]"
}
# hd_run POOL MODE [ENV=VALUE...]: held_client MODE on POOL at a limit of 1 ($hd_pid), its lines
# in $work/hd.POOL.out; hd_go POOL STEP lets it pass STEP.
hd_run() {
    hd_pool=$1
    hd_mode=$2
    shift 2
    env LD_PRELOAD="$preload" DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=$hd_pool PGAPPNAME=$hd_pool \
        HELD_GO=$work/hd.$hd_pool.go "$@" timeout 120 "$top/build/tests/held_client" "$hd_mode" \
        >"$work/hd.$hd_pool.out" 2>"$work/hd.$hd_pool.err" &
    hd_pid=$!
    echo "$hd_pid" >>"$work/pids"
}
hd_go() { touch "$work/hd.$1.go.$2"; }
hd_val() { # hd_val POOL KEY: what held_client said of KEY
    awk -v k="$2=" '{ for (i = 1; i <= NF; i++) if (index($i, k) == 1) { print substr($i, length(k) + 1); exit } }' "$work/hd.$1.out"
}
hd_said() { tr "\n" " " <"$work/hd.$1.out" | cut -c 1-600; }
hd_free() { # hd_free POOL: another client gets the pool's permit within 5 s (prints "free")
    env LD_PRELOAD="$preload" DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=$1 DBTHROTTLE_WAIT_TIMEOUT=5s \
        psql -qAtX -c "select 'free'" 2>&1 | tail -1
}

# 1. Exit with a command held, no PQfinish: operations.md says exit (atexit) gives back every
# permit and place a process holds. The place must go at the exit, while the holder still holds
# (else the dead process is granted the permit when the holder is done, and it stays held until
# its lease runs out).
mark
hd_hold hd_exit 6000
hd_run hd_exit exit_held DBTHROTTLE_WAIT_TIMEOUT=30s
wait "$hd_pid"
rc=$?
wait_until 3 '[ "$(hd_card hd_exit queue)" = 0 ]'
check "held_commands: a process returned from main with a command held (rc $rc; $(hd_said hd_exit)): its place left the queue at its exit, while the holder held (queue $(hd_card hd_exit queue), holders $(hd_card hd_exit holders))" \
    '[ $rc -eq 0 ] && [ "$(hd_val hd_exit send)" = 1 ] && [ "$(hd_val hd_exit send_ms)" -lt 1000 ] && [ "$(hd_card hd_exit queue)" = 0 ] && [ "$(hd_card hd_exit holders)" = 1 ]'
wait "$hd_holder"
after=$(hd_free hd_exit)
check "held_commands: after the holder, the permit is free at once ($after); the command never reached the server (probes $(probes hd_exit))" \
    '[ "$after" = free ] && [ "$(probes hd_exit)" = 1 ]'

# 2. Redis gone while a command is held, closed mode: the wait ends (within a lease and a
# renewal and the Redis timeout) with 53300, the loop wakes for it; once Redis is back the
# connection runs the next command.
mark
hd_hold hd_closed 30000
hd_run hd_closed refuse DBTHROTTLE_WAIT_TIMEOUT=60s DBTHROTTLE_ON_REDIS_ERROR=closed DBTHROTTLE_LEASE=1s
wait_until 10 'grep -q "^send=" "$work/hd.hd_closed.out" 2>/dev/null'
redis_kill
wait_until 20 'grep -q "^tx=" "$work/hd.hd_closed.out"'
redis_start
psql -qAtX -c "select pg_cancel_backend(pid) from pg_stat_activity where application_name = 'hd_closed' and state = 'active'" >/dev/null
wait "$hd_holder"
check "held_commands: Redis killed while held, closed mode: the loop woke ($(hd_val hd_closed ready_ms) ms, longest gap $(hd_val hd_closed maxgap_ms) ms) with 53300 then NULL ($(hd_said hd_closed))" \
    '[ "$(hd_val hd_closed send)" = 1 ] && [ "$(hd_val hd_closed result)" = FATAL_ERROR:53300,NULL ] && [ "$(hd_val hd_closed ready_ms)" -lt 15000 ] && [ "$(hd_val hd_closed maxgap_ms)" -lt 500 ]'
# Acquires do not retry Redis for one second after a failure (operations.md): the next command
# comes after that second, else it would be refused by the backoff, not by the outage.
sleep 1.2
hd_go hd_closed next
wait "$hd_pid"
rc=$?
check "held_commands: Redis back: the next command runs ($(hd_val hd_closed next) $(grep -o "next_error=.*" "$work/hd.hd_closed.out"); rc $rc); the refused one never reached the server (probes $(probes hd_closed))" \
    '[ $rc -eq 0 ] && [ "$(hd_val hd_closed next)" = TUPLES_OK:next ] && [ "$(probes hd_closed)" = 1 ]'

# 3. The same in open mode: the held command is sent unthrottled once the wait gives up on Redis,
# and its result wakes the loop.
mark
hd_hold hd_open 30000
hd_run hd_open wait DBTHROTTLE_WAIT_TIMEOUT=60s DBTHROTTLE_ON_REDIS_ERROR=open DBTHROTTLE_LEASE=1s
wait_until 10 'grep -q "^send=" "$work/hd.hd_open.out" 2>/dev/null'
redis_kill
wait_until 20 'grep -q "^tx=" "$work/hd.hd_open.out"'
redis_start
psql -qAtX -c "select pg_cancel_backend(pid) from pg_stat_activity where application_name = 'hd_open' and state = 'active'" >/dev/null
wait "$hd_holder"
wait "$hd_pid"
rc=$?
check "held_commands: Redis killed while held, open mode: the command ran unthrottled and its result woke the loop ($(hd_val hd_open ready_ms) ms, longest gap $(hd_val hd_open maxgap_ms) ms; $(hd_said hd_open); rc $rc)" \
    '[ $rc -eq 0 ] && [ "$(hd_val hd_open send)" = 1 ] && [ "$(hd_val hd_open result)" = TUPLES_OK:2,NULL ] && [ "$(hd_val hd_open ready_ms)" -lt 15000 ] && [ "$(hd_val hd_open maxgap_ms)" -lt 500 ]'
wait_until 10 '[ "$(live_holders)" -eq 0 ] && [ "$(live_waiters)" -eq 0 ]'
check "held_commands: nothing held or queued in the end" 'nothing_left'
