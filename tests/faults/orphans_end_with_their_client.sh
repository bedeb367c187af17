# orphans_end_with_their_client.sh - a SIGKILLed holder's statement ends at the server before its
# permit is granted again (issue 29). Limit 1, lease 2 s: a psql in a 20 s probe is SIGKILLed
# while another waits behind it. Its permit comes back with its lease (1.3 to 2.7 s later); the
# server, unless told to watch the client's socket (client_connection_check_interval, which the
# library asks for in the startup options), runs the orphaned probe on for 20 s: the waiter's
# probe would then count 2 at once. Judged at the server: the counter, and the server log's
# order (the orphan's backend exits, "connection to client lost", before the waiter's probe).
# Then what the server was told: a user's own value of the setting is kept, options of the
# user's own (conninfo, PGOPTIONS) are kept beside it, and a server that refuses the setting
# (PostgreSQL 13 and older, here a stand-in in front of ours) is still reached.
echo "# orphans_end_with_their_client: a killed holder's statement ends before its permit is reused"
mark
o_env="PGAPPNAME=orph DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=2s"
# env itself, not throttled: $! must be the psql the SIGKILL is for, not a subshell around it.
env LD_PRELOAD="$preload" $o_env psql -XAtqc "SELECT dbt_probe(20000)" >/dev/null 2>>"$work/orph.err" &
o_holder=$!
wait_until 10 '[ "$(probes orph)" -ge 1 ]'
o_backend=$(psql -XAtc "SELECT pid FROM pg_stat_activity WHERE application_name = 'orph' AND state = 'active'")
env LD_PRELOAD="$preload" $o_env psql -XAtqc "SELECT dbt_probe(300)" >/dev/null 2>>"$work/orph.err" &
o_waiter=$!
wait_until 10 '[ "$(live_waiters)" -ge 1 ]'
o_kill=$(now_ms)
kill -9 "$o_holder"
wait "$o_holder" 2>/dev/null
# How long the orphan outlived its client, as pg_stat_activity shows it (polled: up to one poll
# late). A figure, not the verdict: the server log's order below is that.
o_gone=-1
wait_until 25 '[ "$(psql -XAtc "SELECT count(*) FROM pg_stat_activity WHERE pid = ${o_backend:-0}")" = 0 ]' &&
    o_gone=$(($(now_ms) - o_kill))
wait "$o_waiter"
o_rc=$?
o_conc=$(max_conc orph)
o_n=$(probes orph)
# The lines since the mark: where the orphan's backend ended, where the waiter's probe began.
o_log=$(tail -n +"$((log_mark + 1))" "$work/pg/server.log")
o_lost=$(echo "$o_log" | grep -n "\[${o_backend:-0}\] FATAL:  connection to client lost" | head -1 | cut -d: -f1)
o_second=$(echo "$o_log" | grep -n "dbt_conc app=orph n=" | sed -n 2p | cut -d: -f1)
# And by the server's own clock (its log's timestamps, this host's clock): when it ended.
o_end=-1
o_stamp=$(echo "$o_log" | sed -n "${o_lost:-0}p" | cut -c1-23)
[ -n "$o_stamp" ] && o_end=$(($(date -d "$o_stamp" +%s%3N) - o_kill))
info "the orphan's backend (pid ${o_backend:-?}) ended $o_end ms after its client's SIGKILL (server log), was gone from pg_stat_activity at $o_gone ms (lease 2000 ms)"
check "orphans_end_with_their_client: never 2 probes at once at the server at a limit of 1 (most seen: $o_conc; $o_n probes ran, the waiter's exit status $o_rc)" \
    '[ "$o_conc" -eq 1 ] && [ "$o_n" -eq 2 ] && [ "$o_rc" -eq 0 ]'
check "orphans_end_with_their_client: the orphan's backend ended (server log line ${o_lost:-none}) before the waiter's probe began (line ${o_second:-none})" \
    '[ -n "$o_lost" ] && [ -n "$o_second" ] && [ "$o_lost" -lt "$o_second" ]'
# Whatever the outcome, no orphan runs on into the next case.
psql -XAtqc "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'orph'" >/dev/null

# What the server was told, read back from the server (pg_settings' source: "client" is the
# startup packet).
o_show() { # o_show [ENV=VALUE...] -- PSQL ARGS...: "interval|source|work_mem" of a throttled psql
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=2s "$@" -XAtF'|' -c \
        "SELECT s.setting || s.unit, s.source, current_setting('work_mem') FROM pg_settings s WHERE s.name = 'client_connection_check_interval'" 2>>"$work/orph.err"
}
o_default=$(o_show psql)
o_own=$(o_show psql "options='-c client_connection_check_interval=7000 -c work_mem=7MB'")
o_theirs=$(o_show psql "host=$PGHOST port=$PGPORT options='-c work_mem=7MB'")
o_env_opts=$(o_show PGOPTIONS="-c work_mem=9MB" psql)
o_uri=$(o_show psql "postgresql://$PGUSER@$PGHOST:$PGPORT/$PGDATABASE?options=-c%20work_mem%3D5MB")
o_off=$(o_show DBTHROTTLE_SERVER_CHECK_INTERVAL=off psql)
check "orphans_end_with_their_client: asked by default, at lease/4 ($o_default)" '[ "$o_default" = "500ms|client|4MB" ]'
check "orphans_end_with_their_client: a user's own value in options is kept, with the rest of them ($o_own)" '[ "$o_own" = "7000ms|client|7MB" ]'
check "orphans_end_with_their_client: a conninfo's own options are kept beside it ($o_theirs; PGOPTIONS: $o_env_opts; a URI's: $o_uri)" \
    '[ "$o_theirs" = "500ms|client|7MB" ] && [ "$o_env_opts" = "500ms|client|9MB" ] && [ "$o_uri" = "500ms|client|5MB" ]'
check "orphans_end_with_their_client: DBTHROTTLE_SERVER_CHECK_INTERVAL=off asks nothing ($o_off)" '[ "$o_off" = "0ms|default|4MB" ]'
# A conninfo libpq refuses fails as libpq fails it: not connected from what was resolved of it.
o_bad=$(throttled DBTHROTTLE_MAX_QUERIES=1 psql -XAt "host=$PGHOST bogus=1" -c "SELECT 'connected'" 2>&1)
check "orphans_end_with_their_client: a bad conninfo still fails with libpq's own message ($o_bad)" \
    'echo "$o_bad" | grep -q "invalid connection option \"bogus\"" && ! echo "$o_bad" | grep -q connected'

# A server that refuses the setting at startup, as PostgreSQL 13 and older do: a stand-in in
# front of ours answers a startup packet that names it with their FATAL, and relays the others.
# A blocking connect is made again without it (and warns once); an asynchronous one fails once,
# and the next goes without.
o_port=$(free_port)
python3 "$here/refusing_server.py" "$o_port" "$PGPORT" 2>>"$work/orph.err" &
o_stand_in=$!
wait_until 5 'psql -XAtq -p "$o_port" -c "SELECT 1" >/dev/null 2>&1'
o_refused=$(o_show DBTHROTTLE_LOG="$work/orph.refused.log" psql -p "$o_port")
kill "$o_stand_in" 2>/dev/null
wait "$o_stand_in" 2>/dev/null
check "orphans_end_with_their_client: a server that refuses the setting is still reached ($o_refused), with one warning naming the way out" \
    '[ "$o_refused" = "0ms|default|4MB" ] && [ "$(grep -c "event=server_check_refused.*DBTHROTTLE_SERVER_CHECK_INTERVAL=off" "$work/orph.refused.log")" -eq 1 ]'
rcli flushall >/dev/null
