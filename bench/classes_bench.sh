#!/bin/sh
# classes_bench.sh - `make bench-classes`: the issue's measured acceptance of classes and weights,
# in one run against a throwaway Redis and PostgreSQL on loopback, measured from outside the
# library (pgbench's per-transaction logs, Redis' own holders and queue, pg_stat_activity and
# advisory locks at the server).
#
# Mix: limit 20; 200 batch clients saturate it with SELECT pg_sleep(0.05); after CLASSES_BENCH_IDLE
# seconds of batch alone (default 5), 20 interactive clients issue SELECT pg_sleep(0.005) at 200/s
# in all (pgbench -R: Poisson think time) for CLASSES_BENCH_SECONDS (default 20). Run twice with
# the same clients: first with one FIFO class (no definitions in Redis), then with the classes
# interactive 75 % (priority 1) and batch 25 % written to the pool's `classes` key, aging bound
# CLASSES_BENCH_AGING_MS (default 1000). Prints the interactive wait p99 both ways, batch's permits
# while it waits and when interactive is idle, the longest wait, the throughput against the ideal
# (20 permits always busy).
# Weights: limit 8, 16 clients mixing `/* heavy */ SELECT bench_units(4, 100)` (1 in 4) and
# `SELECT bench_units(1, 20)`, with DBTHROTTLE_WEIGHTS giving the heavy ones weight 4, then without
# weights: the units running at once at the server (each statement holds one advisory lock per unit
# of its weight while it runs, and counts them all).
# DBT_KEEP=1 keeps the logs and samples (and says where).
# A library built without class settings (DBTHROTTLE_CLASS_RULES) runs the FIFO mix only.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
lib=$top/build/libdbthrottle.so
IDLE=${CLASSES_BENCH_IDLE:-5}
MIXED=${CLASSES_BENCH_SECONDS:-20}
AGING=${CLASSES_BENCH_AGING_MS:-1000}
WSECS=${CLASSES_BENCH_WEIGHT_SECONDS:-10}
work=$(mktemp -d /tmp/dbt-classes-bench-XXXXXX)
chmod 755 "$work"
cleanup() {
    for p in $(cat "$work/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null
    sh "$top/tools/pgtmp.sh" stop "$work/pg" 2>/dev/null || true
    if [ -n "${DBT_KEEP:-}" ]; then echo "# kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# A port nothing uses now; a redis-server that loses the race for it is started on another.
for try in 1 2 3 4 5; do
    rport=$(($(od -An -N2 -tu2 /dev/urandom) % 30000 + 20000))
    ss -Htan "( sport = :$rport )" | grep -q . && continue
    redis-server --port "$rport" --bind 127.0.0.1 --save "" --dir "$work" --logfile "$work/redis.log" &
    redis_pid=$!
    i=0
    until redis-cli -p "$rport" ping >/dev/null 2>&1 || [ $i -ge 100 ] || ! kill -0 "$redis_pid" 2>/dev/null; do
        i=$((i + 1))
        sleep 0.05
    done
    redis-cli -p "$rport" ping >/dev/null 2>&1 && break
    kill "$redis_pid" 2>/dev/null || true
    redis_pid=
done
[ -n "${redis_pid:-}" ] || { echo "redis-server did not start" >&2; exit 1; }
rcli() { redis-cli -p "$rport" "$@"; }
PGPORT=$(sh "$top/tools/pgtmp.sh" start "$work/pg")
export PGHOST=127.0.0.1 PGPORT PGUSER=postgres PGDATABASE=postgres
# 220 clients, the samplers and psql: more than pgtmp's 200.
psql -qAtX -c "ALTER SYSTEM SET max_connections = 260" >/dev/null
sh "$top/tools/pgtmp.sh" restart "$work/pg" >/dev/null 2>&1
# bench_sample(run, seconds): what runs at the server, sampled by the server every 10 ms (a
# procedure that commits each sample, so that each reads pg_stat_activity anew), until the run is
# in bench_done or the seconds have passed.
# bench_units(w, ms): a statement of weight w: holds w advisory locks of its own while it runs and
# logs how many such locks are held at once (itself included); only a real overlap raises it.
psql -qAtX <<'SQL' >/dev/null
CREATE UNLOGGED TABLE bench_samples (run text, t float8, batch int, interactive int);
CREATE UNLOGGED TABLE bench_done (run text);
CREATE PROCEDURE bench_sample(run text, seconds float8) LANGUAGE plpgsql AS $$
DECLARE t_end timestamptz := clock_timestamp() + make_interval(secs => seconds);
BEGIN
    WHILE clock_timestamp() < t_end AND NOT EXISTS (SELECT FROM bench_done d WHERE d.run = bench_sample.run) LOOP
        INSERT INTO bench_samples
        SELECT run, extract(epoch FROM clock_timestamp()) * 1000,
               count(*) FILTER (WHERE application_name = 'batch'),
               count(*) FILTER (WHERE application_name = 'interactive')
          FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid();
        COMMIT;
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
CREATE FUNCTION bench_units(w int, ms int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
    FOR i IN 1..w LOOP
        PERFORM pg_advisory_lock(4242, pg_backend_pid() * 8 + i);
    END LOOP;
    BEGIN
        SELECT count(*) INTO n FROM pg_locks
         WHERE locktype = 'advisory' AND classid = 4242 AND objsubid = 2 AND granted;
        RAISE LOG 'bench_units n=%', n;
        PERFORM pg_sleep(ms / 1000.0);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock_all();
        RAISE;
    END;
    PERFORM pg_advisory_unlock_all();
    RETURN n;
END $$;
SQL
echo "SELECT pg_sleep(0.05);" >"$work/batch.sql"
echo "SELECT pg_sleep(0.005);" >"$work/interactive.sql"
echo "/* heavy */ SELECT bench_units(4, 100);" >"$work/heavy.sql"
echo "SELECT bench_units(1, 20);" >"$work/light.sql"

rtt=$(python3 "$top/bench/classes_sample.py" rtt "$rport")
classes=
strings "$lib" | grep -q DBTHROTTLE_CLASS_RULES && classes=1
# throttle DIR ENV... pgbench ... &: pgbench in DIR (its logs go there) with the library; run in the
# background, the subshell becomes pgbench, so the pid Redis sees is $!.
throttle() {
    td=$1
    shift
    exec env -C "$td" LD_PRELOAD="$lib" DBTHROTTLE_REDIS_URL="redis://127.0.0.1:$rport" \
        DBTHROTTLE_WAIT_TIMEOUT=120s DBTHROTTLE_LOG_LEVEL=error "$@"
}
# Both runs give each client its class by its application_name (with no definitions in Redis
# both classes are served as the one default class: FIFO).
class_env=
[ -n "$classes" ] && class_env="DBTHROTTLE_CLASS_RULES=interactive:application_name=interactive;batch:application_name=batch"

# sampling DIR POOL SECONDS: Redis' and pg_stat_activity's samplers, in the background.
sampling() {
    python3 "$top/bench/classes_sample.py" "$rport" "$2" "$1/pids" "$1/redis.samples" "$1/stop" &
    echo $! >>"$work/pids"
    sampler=$!
    psql -qAtX -c "CALL bench_sample('$2', $3)" >/dev/null &
    echo $! >>"$work/pids"
    pg_sampler=$!
}
sampling_end() {
    touch "$1/stop"
    psql -qAtX -c "INSERT INTO bench_done VALUES ('$2')" >/dev/null
    wait "$sampler" "$pg_sampler"
    psql -qAtX -F ' ' -c "SELECT t, batch, interactive FROM bench_samples WHERE run = '$2'" >"$1/pg.samples"
}

# mix POOL DEFINITION: one run of the batch and interactive clients in pool POOL, with the class
# definition text DEFINITION in its `classes` key (none: one FIFO class).
mix() {
    d=$work/$1
    mkdir -p "$d"
    [ -n "$2" ] && rcli SET "dbthrottle:{$1}:q:classes" "$2" >/dev/null
    sampling "$d" "$1" $((IDLE + MIXED + 30))
    throttle "$d" DBTHROTTLE_POOL="$1" DBTHROTTLE_MAX_QUERIES=20 $class_env PGAPPNAME=batch \
        pgbench -n -c 200 -j 200 -T $((IDLE + MIXED + 3)) -f "$work/batch.sql" -l --log-prefix=batch \
        >"$d/batch.out" 2>&1 &
    batch=$!
    echo "$batch" >>"$work/pids"
    echo "batch $batch" >>"$d/pids"
    # batch saturates the limit once it queues
    i=0
    until [ "$(rcli ZCARD "dbthrottle:{$1}:q:queue")" -gt 0 ] || [ $i -ge 600 ]; do i=$((i + 1)); sleep 0.05; done
    sleep "$IDLE"
    echo "interactive_start $(date +%s%3N)" >>"$d/phases"
    throttle "$d" DBTHROTTLE_POOL="$1" DBTHROTTLE_MAX_QUERIES=20 $class_env PGAPPNAME=interactive \
        pgbench -n -c 20 -j 20 -R 200 -T "$MIXED" -f "$work/interactive.sql" -l --log-prefix=interactive \
        >"$d/interactive.out" 2>&1 &
    inter=$!
    echo "$inter" >>"$work/pids"
    echo "interactive $inter" >>"$d/pids"
    wait "$inter" || { cat "$d/interactive.out" >&2; exit 1; }
    echo "interactive_end $(date +%s%3N)" >>"$d/phases"
    wait "$batch" || { cat "$d/batch.out" >&2; exit 1; }
    sampling_end "$d" "$1"
}
# weighted POOL WEIGHTS: 16 clients of heavy and light statements at a limit of 8.
weighted() {
    d=$work/$1
    mkdir -p "$d"
    sampling "$d" "$1" $((WSECS + 30))
    from=$(wc -l <"$work/pg/server.log")
    throttle "$d" DBTHROTTLE_POOL="$1" DBTHROTTLE_MAX_QUERIES=8 ${2:+"DBTHROTTLE_WEIGHTS=$2"} \
        pgbench -n -c 16 -j 16 -T "$WSECS" -f "$work/heavy.sql@1" -f "$work/light.sql@3" -l \
        --log-prefix=weights >"$d/weights.out" 2>&1 &
    echo $! >>"$work/pids"
    wait $! || { cat "$d/weights.out" >&2; exit 1; }
    tail -n +"$((from + 1))" "$work/pg/server.log" | grep 'bench_units n=' >"$d/units.log" || true
    sampling_end "$d" "$1"
}

report() { python3 "$top/bench/classes_report.py" "$@"; }
echo "dbthrottle classes benchmark (loopback; one run; Redis PING round trip p50 $rtt ms)"
mix fifo ""
report mix "$work/fifo" FIFO 20 0 "$rtt"
if [ -z "$classes" ]; then
    echo "(this library has no class settings: the classes and weights runs are left out)"
    exit 0
fi
mix classes "aging=$AGING;default=batch;interactive:75:1:-:-;batch:25:0:-:-"
report mix "$work/classes" "classes interactive 75% (priority 1), batch 25%, aging ${AGING} ms" 20 "$AGING" "$rtt"
report compare "$work/fifo" "$work/classes" "$rtt"
weighted weights '4:sql=^\s*/\*\s*heavy'
report weights "$work/weights" "weights: limit 8, heavy statements weigh 4 (DBTHROTTLE_WEIGHTS)" 8
weighted noweights ""
report weights "$work/noweights" "the same statements without weights (each takes 1 permit)" 8
