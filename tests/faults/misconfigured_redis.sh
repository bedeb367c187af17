# misconfigured_redis.sh - a Redis that refuses the configuration (wrong password, no password,
# an unexpected password, an ACL without a command the scripts need, a DB index out of range, an
# unknown host, a maxmemory-policy that may evict the pool's keys) is a configuration error: with
# DBTHROTTLE_ON_REDIS_ERROR=open (the default) every throttled command is still refused, SQLSTATE
# 53300, with a message naming the cause and the setting to fix, and never runs at the server
# (read from the server's log of dbt_probe); the error is logged once, not once per command; no
# secret shows; and once the cause is fixed in Redis the same process throttles again within a
# few seconds, by itself.
echo "# misconfigured_redis: permanent Redis errors refuse loudly and recover by themselves"
mr_url_plain=redis://127.0.0.1:$rport

# mr_psql NAME URL: one psql command (application_name mr_NAME) with the preload; its output in
# $work/mr.NAME.psql (the worker below counts the SQLSTATEs).
mr_psql() {
    PGAPPNAME="mr_$1" throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="$2" \
        DBTHROTTLE_REDIS_TIMEOUT=500ms psql -X -c "SELECT dbt_probe(0)" \
        >"$work/mr.$1.psql" 2>&1
}
# mr_worker NAME URL: a fault worker (application_name mr_NAME_w) that runs probes until TERMed;
# stdout (its summary) in $work/mr.NAME.w, stderr (the library's log) in $work/mr.NAME.err.
mr_worker() {
    PGAPPNAME="mr_$1_w" env LD_PRELOAD="$preload" DBTHROTTLE_MAX_QUERIES=2 \
        DBTHROTTLE_REDIS_URL="$2" DBTHROTTLE_REDIS_TIMEOUT=500ms "$worker" -n 0 -s 0 \
        >"$work/mr.$1.w" 2>"$work/mr.$1.err" &
    mr_pid=$!
    echo "$mr_pid" >>"$work/pids"
}
mr_worker_stop() { kill -TERM "$mr_pid" 2>/dev/null; wait "$mr_pid" 2>/dev/null; }

# mr_case NAME URL CAUSE_REGEX FIX_COMMAND SECRET: the checks above for one misconfiguration;
# FIX_COMMAND ("" when it cannot be fixed from Redis' side) is eval'ed while the worker runs.
mr_case() {
    mr_name=$1 mr_url=$2 mr_cause=$3 mr_fix=$4 mr_secret=$5
    mark
    rcli CONFIG RESETSTAT >/dev/null
    mr_psql "$mr_name" "$mr_url"
    mr_worker "$mr_name" "$mr_url"
    # Refused at least once (its error logged), then a few seconds more of refusals.
    wait_until 20 'grep -q "event=redis_misconfigured" "$work/mr.$mr_name.err"'
    wait_until 3 'false'
    mr_conns=$(rcli INFO stats | tr -d '\r' | sed -n 's/^total_connections_received://p')
    mr_cmds=$(rcli INFO stats | tr -d '\r' | sed -n 's/^total_commands_processed://p')
    check "misconfigured_redis $mr_name: no round trip per refused command (Redis saw $mr_conns connections, $mr_cmds commands)" \
        '[ "$mr_conns" -le 25 ] && [ "$mr_cmds" -le 150 ]'
    check "misconfigured_redis $mr_name: psql's command was refused, naming the cause and the setting: $(grep -m1 "^dbthrottle:" "$work/mr.$mr_name.psql")" \
        'grep "^dbthrottle: no query permit" "$work/mr.$mr_name.psql" | grep -E "$mr_cause" | grep -Eq "DBTHROTTLE_REDIS_URL|maxmemory-policy"'
    check "misconfigured_redis $mr_name: nothing ran at the server while it lasted ($(probes "mr_$mr_name") + $(probes "mr_${mr_name}_w") probes)" \
        '[ "$(probes "mr_$mr_name")" -eq 0 ] && [ "$(probes "mr_${mr_name}_w")" -eq 0 ]'
    check "misconfigured_redis $mr_name: logged at error level once, not per command ($(grep -c event=redis_misconfigured "$work/mr.$mr_name.err") lines)" \
        '[ "$(grep -c "level=error.*event=redis_misconfigured\|event=redis_misconfigured.*level=error" "$work/mr.$mr_name.err")" -eq 1 ]'
    if [ -n "$mr_fix" ]; then
        eval "$mr_fix"
        mr_t0=$(now_ms)
        wait_until 20 '[ "$(probes "mr_${mr_name}_w")" -gt 0 ]'
        mr_took=$(($(now_ms) - mr_t0))
        check "misconfigured_redis $mr_name: fixed in Redis, the same worker throttles again within 5 s (${mr_took} ms)" \
            '[ "$(probes "mr_${mr_name}_w")" -gt 0 ] && [ "$mr_took" -le 5000 ]'
    fi
    mr_worker_stop
    check "misconfigured_redis $mr_name: the worker's refusals were 53300 ($(cat "$work/mr.$mr_name.w"))" \
        'grep -q "codes=.*53300:" "$work/mr.$mr_name.w"'
    check "misconfigured_redis $mr_name: no secret in any output" \
        '! grep -q -- "$mr_secret" "$work/mr.$mr_name.psql" "$work/mr.$mr_name.err" "$work/mr.$mr_name.w"'
}

# A wrong password; fixed by giving Redis the password the URL has.
redis_stop
redis_start --requirepass mr-Right-Secret-1
rcli() { redis-cli -p "$rport" --no-auth-warning -a mr-Right-Secret-1 "$@"; }
mr_case wrongpass "redis://:mr-Wrong-Secret-2@127.0.0.1:$rport" "WRONGPASS" \
    'rcli CONFIG SET requirepass mr-Wrong-Secret-2 >/dev/null' "Secret"
# No password where Redis requires one; fixed by Redis requiring none.
rcli() { redis-cli -p "$rport" --no-auth-warning -a mr-Wrong-Secret-2 "$@"; }
rcli CONFIG SET requirepass mr-Right-Secret-3 >/dev/null
rcli() { redis-cli -p "$rport" --no-auth-warning -a mr-Right-Secret-3 "$@"; }
mr_case noauth "$mr_url_plain" "NOAUTH" 'rcli CONFIG SET requirepass "" >/dev/null' "Secret"
rcli() { redis-cli -p "$rport" "$@"; }
# A password where Redis has none; fixed by configuring it.
mr_case unexpected_password "redis://:mr-Extra-Secret-4@127.0.0.1:$rport" "none configured" \
    'rcli CONFIG SET requirepass mr-Extra-Secret-4 >/dev/null' "Secret"
rcli() { redis-cli -p "$rport" --no-auth-warning -a mr-Extra-Secret-4 "$@"; }
rcli CONFIG SET requirepass "" >/dev/null
rcli() { redis-cli -p "$rport" "$@"; }
# An ACL user that may not run the scripts; fixed by granting it.
rcli ACL SETUSER mr_worker on ">mr-Acl-Secret-5" "~*" "+@all" "-evalsha" >/dev/null
mr_case noperm "redis://mr_worker:mr-Acl-Secret-5@127.0.0.1:$rport" "NOPERM" \
    'rcli ACL SETUSER mr_worker +evalsha >/dev/null' "Secret"
# An ACL user without +info works (nothing refused) but is warned about once.
rcli ACL SETUSER mr_noinfo on ">mr-Info-Secret-6" "~*" "+@all" "-info" >/dev/null
mark
PGAPPNAME=mr_noinfo throttled DBTHROTTLE_MAX_QUERIES=2 \
    DBTHROTTLE_REDIS_URL="redis://mr_noinfo:mr-Info-Secret-6@127.0.0.1:$rport" \
    psql -X -c "SELECT dbt_probe(0)" -c "SELECT dbt_probe(0)" >"$work/mr.noinfo.psql" 2>&1
check "misconfigured_redis noinfo: a user without +info runs its commands, warned once that the policy is not verified" \
    '[ "$(probes mr_noinfo)" -eq 2 ] && [ "$(grep -c "event=redis_unverified" "$work/mr.noinfo.psql")" -eq 1 ] && ! grep -q "Secret" "$work/mr.noinfo.psql"'
# A DB index out of range (databases 16) and an unknown host: nothing in Redis can fix them.
mr_case db_index "redis://127.0.0.1:$rport/99" "database number" "" "no-secret-here"
mr_case unknown_host "redis://mr-no-such-host.invalid:$rport" "does not resolve" "" "no-secret-here"
# A maxmemory-policy that may evict the pool's keys; fixed by noeviction.
rcli CONFIG SET maxmemory-policy allkeys-lru >/dev/null
mr_case eviction "$mr_url_plain" "maxmemory-policy is allkeys-lru" \
    'rcli CONFIG SET maxmemory-policy noeviction >/dev/null' "no-secret-here"
# A permanent error that only one operation meets: an ACL without BLPOP refuses the waiters'
# listener while every uncontended acquire succeeds, so the pool is misconfigured, then fixed by
# the next success, then misconfigured again. Logged once a minute all the same (the flapping
# logged 7 error and 6 redis_fixed lines in 12 s), and the limit holds throughout.
rcli ACL SETUSER mr_noblpop on ">mr-Blpop-Secret-7" "~*" "+@all" "-blpop" >/dev/null
mark
PGAPPNAME=mr_noblpop env LD_PRELOAD="$preload" DBTHROTTLE_MAX_QUERIES=1 \
    DBTHROTTLE_REDIS_URL="redis://mr_noblpop:mr-Blpop-Secret-7@127.0.0.1:$rport" \
    DBTHROTTLE_REDIS_TIMEOUT=500ms "$worker" -T 4 -n 0 -s 20 \
    >"$work/mr.noblpop.w" 2>"$work/mr.noblpop.err" &
mr_pid=$!
echo "$mr_pid" >>"$work/pids"
wait_until 20 'grep -q "event=redis_misconfigured" "$work/mr.noblpop.err"'
wait_until 8 'false' # a window of 8 s in which it comes and goes
mr_worker_stop
mr_errs=$(grep -c "event=redis_misconfigured" "$work/mr.noblpop.err")
mr_fixes=$(grep -c "event=redis_fixed" "$work/mr.noblpop.err")
check "misconfigured_redis noblpop: a cause that comes and goes is logged once, its fix once ($mr_errs error, $mr_fixes redis_fixed lines in 8 s)" \
    '[ "$mr_errs" -eq 1 ] && [ "$mr_fixes" -le 1 ]'
check "misconfigured_redis noblpop: the limit of 1 held ($(probes mr_noblpop) probes ran, at most $(max_conc mr_noblpop) at once)" \
    '[ "$(probes mr_noblpop)" -ge 1 ] && [ "$(max_conc mr_noblpop)" -le 1 ]'
# The log's word too: a refusal that raced the fix and ran unthrottled is said there even when
# its statement overlapped nobody's.
check "misconfigured_redis noblpop: no command ran unthrottled ($(grep -c "event=unthrottled" "$work/mr.noblpop.err") lines say so)" \
    '! grep -q "event=unthrottled" "$work/mr.noblpop.err"'
check "misconfigured_redis noblpop: no secret in any output" \
    '! grep -q -- "Secret" "$work/mr.noblpop.err" "$work/mr.noblpop.w"'
# A transient error keeps its mode: Redis gone, open mode, the command runs unthrottled.
mark
redis_stop
PGAPPNAME=mr_transient throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_TIMEOUT=300ms \
    psql -X -c "SELECT dbt_probe(0)" >"$work/mr.transient.psql" 2>&1
check "misconfigured_redis transient: Redis down in open mode still runs the command unthrottled" \
    '[ "$(probes mr_transient)" -eq 1 ] && ! grep -q 53300 "$work/mr.transient.psql"'
redis_start
