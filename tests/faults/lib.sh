# lib.sh - what every fault case shares (sourced by run.sh): the servers, the independent
# concurrency counter at the server, Redis' own view of the pools, and check reporting.
#
# The counter: dbt_probe(ms), at its start, takes an advisory lock keyed by its own
# application_name and backend pid, counts the granted locks of that application_name (itself
# included), writes "dbt_conc app=A n=N" to the server log, sleeps ms and unlocks (on an error or
# a cancel too; a session that ends loses its locks). Each probe holds its lock within its
# statement, so within the permit its client held: the largest N is a lower bound of the permits
# held at once that only a real overlap can raise. (Not a transaction-level lock: a permit kept
# idle in a transaction may legitimately pass to another once its lease runs out.) It is read from the server, not from anything
# the throttle says. (pg_stat_activity's count of 'active' backends was used before: it read 5 and
# 6 where the locks, at the same instants, were 3 and 2, so it cannot bound a limit of 4.)

top=$(cd "$(dirname "$0")/../.." && pwd)
# The sanitizer runs (make check-asan, check-tsan, check-valgrind) swap in their own builds:
# DBT_LIB the library, DBT_PRELOAD_FIRST a runtime to preload before it, DBT_WORKER the worker,
# DBT_WRAP a command to run each worker under, DBT_SANITIZER_LOGS where reports would go.
lib=${DBT_LIB:-$top/build/libdbthrottle.so}
preload=${DBT_PRELOAD_FIRST:+$DBT_PRELOAD_FIRST:}$lib
worker=${DBT_WORKER:-$top/build/tests/fault_worker}
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
check() { # check "what" "shell condition"
    if eval "$2"; then ok "$1"; else fail "$1"; fi
}
note() { echo "#      $*"; }

free_port() {
    echo $(( ( $(od -An -N2 -tu2 /dev/urandom) % 30000 ) + 20000 ))
}

# ---- Redis --------------------------------------------------------------------------------------
# redis_start [extra options...]: on $rport (chosen on first start, kept across restarts so the
# workers find it again), data in $work/redis, pid in $redis_pid.
redis_start() {
    mkdir -p "$work/redis"
    rs_tries=0
    while :; do
        [ -n "${rport:-}" ] || rport=$(free_port)
        redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
            --dir "$work/redis" --logfile "$work/redis/redis.log" --enable-debug-command yes "$@" &
        redis_pid=$!
        i=0
        until rcli ping 2>&1 | grep -qE "PONG|NOAUTH"; do
            i=$((i + 1))
            kill -0 "$redis_pid" 2>/dev/null && [ $i -lt 200 ] || break
            sleep 0.05
        done
        rcli ping 2>&1 | grep -qE "PONG|NOAUTH" && break
        kill -9 "$redis_pid" 2>/dev/null
        rs_tries=$((rs_tries + 1))
        [ $rs_tries -lt 5 ] || { echo "FAIL - redis-server did not start"; exit 1; }
        [ -n "${redis_started:-}" ] || rport= # the port was taken: another one
        sleep 0.2
    done
    redis_started=1
    export DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$rport
}
redis_kill() { kill -9 "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; redis_pid=; }
redis_stop() { [ -n "${redis_pid:-}" ] && { kill -TERM "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; }; redis_pid=; }
rcli() { redis-cli -p "$rport" "$@"; }

# live_holders / live_waiters [KIND [PREFIX]]: permits (waiters) whose lease has not run out, over
# every pool, by Redis' own clock (expired entries that no script has reaped yet do not count).
live_count() { # live_count ZSET_SUFFIX [KIND [PREFIX]]
    rcli --raw eval "local now = redis.call('TIME') now = now[1] * 1000 + math.floor(now[2] / 1000)
        local n, cur = 0, '0'
        repeat
            local r = redis.call('SCAN', cur, 'MATCH', ARGV[2] .. '*:' .. ARGV[1] .. ':' .. ARGV[3], 'COUNT', 1000)
            cur = r[1]
            for _, k in ipairs(r[2]) do n = n + redis.call('ZCOUNT', k, now, '+inf') end
        until cur == '0'
        return n" 0 "${2:-q}" "${3-dbthrottle:}" "$1"
}
live_holders() { live_count holders "$@"; }
live_waiters() { live_count wexp "$@"; }

# wait_until SECONDS "condition": polls every 20 ms; true if it held in time. Prints how long.
wait_until() {
    wu_t0=$(date +%s%N)
    wu_end=$((wu_t0 + $1 * 1000000000))
    while ! eval "$2"; do
        [ "$(date +%s%N)" -lt "$wu_end" ] || { waited_ms=-1; return 1; }
        sleep 0.02
    done
    waited_ms=$(( ($(date +%s%N) - wu_t0) / 1000000 ))
    return 0
}

# ---- PostgreSQL -------------------------------------------------------------------------------
pg_start() {
    PGPORT=$(sh "$top/tools/pgtmp.sh" start "$work/pg") || { echo "FAIL - PostgreSQL did not start"; exit 1; }
    export PGHOST=127.0.0.1 PGPORT PGUSER=postgres PGDATABASE=postgres
    psql -qAtX <<'SQL' >/dev/null
CREATE FUNCTION dbt_probe(ms int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int; app text := current_setting('application_name'); k int := hashtext(app);
BEGIN
    PERFORM pg_advisory_lock(k, pg_backend_pid());
    BEGIN
        SELECT count(*) INTO n FROM pg_locks
         WHERE locktype = 'advisory' AND classid = k::oid AND objsubid = 2 AND granted;
        RAISE LOG 'dbt_conc app=% n=%', app, n;
        PERFORM pg_sleep(ms / 1000.0);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(k, pg_backend_pid());
        RAISE;
    END;
    PERFORM pg_advisory_unlock(k, pg_backend_pid());
    RETURN n;
END $$;
SQL
}
pg_stop() { sh "$top/tools/pgtmp.sh" stop "$work/pg" 2>/dev/null; }

# mark: remembers where the server log is now; max_conc APP: the most probes of application APP
# that ran at once since the mark; probes APP: how many ran since the mark.
mark() { log_mark=$(wc -l <"$work/pg/server.log"); }
max_conc() {
    tail -n +"$((log_mark + 1))" "$work/pg/server.log" |
        awk -v app="app=$1" '$0 ~ "dbt_conc " app " n=" { sub(/.* n=/, ""); if ($1 + 0 > m) m = $1 + 0 } END { print m + 0 }'
}
probes() {
    tail -n +"$((log_mark + 1))" "$work/pg/server.log" | grep -c "dbt_conc app=$1 n="
}

throttled() { env LD_PRELOAD="$preload" "$@"; }

# sum_field FIELD FILES...: adds up FIELD=N over the workers' summary lines.
sum_field() {
    f=$1
    shift
    cat "$@" 2>/dev/null | tr ' ' '\n' | awk -F= -v f="$f" '$1 == f { s += $2 } END { print s + 0 }'
}
max_field() {
    f=$1
    shift
    cat "$@" 2>/dev/null | tr ' ' '\n' | awk -F= -v f="$f" '$1 == f && $2 + 0 > m { m = $2 + 0 } END { print m + 0 }'
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
rand() { echo $(( $(od -An -N2 -tu2 /dev/urandom) % $1 )); }
# wait_workers: waits for every worker spawned since the last call (not for the servers).
wait_workers() {
    for p in ${spawned_list:-}; do wait "$p"; done
    spawned_list=
}
