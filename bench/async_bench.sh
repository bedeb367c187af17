#!/bin/sh
# async_bench.sh - what an event loop loses to the throttle (issue 15), in one run against a
# throwaway Redis and PostgreSQL on loopback: pgbench -c 8 at a limit of 4 with its threads each
# driving 2 connections (-j 4) or all 8 (-j 1), beside one connection per thread (-j 8, where a
# wait for a permit stops nobody else), for SELECT pg_sleep(0.002) and for the built-in TPC-B
# (scale 1). Prints each tps and the ratios j4/j8 and j1/j8 (target >= 0.9), and the same ratios
# unthrottled: what pgbench itself loses by driving several connections per thread on this machine
# (on 2 loaded cores, TPC-B -j 1 / -j 8 was 0.77 without the library). A run with aborted
# clients (a loop that deadlocked on its own permits until the 20 s wait timeout) is marked so.
# ASYNC_BENCH_SECONDS sets each run's length (default 10).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
lib=$top/build/libdbthrottle.so
work=$(mktemp -d /tmp/dbt-async-bench-XXXXXX)
chmod 755 "$work"
cleanup() {
    [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null
    sh "$top/tools/pgtmp.sh" stop "$work/pg" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
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
PGPORT=$(sh "$top/tools/pgtmp.sh" start "$work/pg")
export PGHOST=127.0.0.1 PGPORT PGUSER=postgres PGDATABASE=postgres
pgbench -i -q -s 1 >/dev/null 2>&1
echo "SELECT pg_sleep(0.002);" >"$work/sleep.sql"

T=${ASYNC_BENCH_SECONDS:-10}
# run SCRIPT THREADS: the tps of pgbench -c 8 -j THREADS at a limit of 4, "!" after it when a
# client aborted.
run() {
    out=$(env LD_PRELOAD="$lib" DBTHROTTLE_REDIS_URL="redis://127.0.0.1:$rport" DBTHROTTLE_MAX_QUERIES=4 \
        DBTHROTTLE_WAIT_TIMEOUT=20s DBTHROTTLE_LOG_LEVEL=error pgbench -n -c 8 -j "$2" -T "$T" $1 2>&1 || true)
    tps_of "$out"
}
# direct SCRIPT THREADS: the same without the library.
direct() { tps_of "$(pgbench -n -c 8 -j "$2" -T "$T" $1 2>&1 || true)"; }
tps_of() {
    out=$1
    tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
    printf "%.1f%s" "${tps:-0}" "$(echo "$out" | grep -q aborted && echo '!' || true)"
}
# ratios LABEL "J4 J1 J8" SUFFIX
ratios() {
    echo "$2" | tr -d '!' | awk -v n="$1" -v s="$3" '{ printf "%-54s %10.2f, j1/j8 %.2f%s\n", n, ($3 > 0 ? $1 / $3 : 0), ($3 > 0 ? $2 / $3 : 0), s }'
}
echo "dbthrottle: pgbench -c 8 at a limit of 4, several connections per thread (loopback; one run; ${T} s each)"
for script in sleep tpcb; do
    if [ $script = sleep ]; then args="-f $work/sleep.sql" name="SELECT pg_sleep(0.002)"; else args="-b tpcb-like" name="TPC-B (scale 1)"; fi
    j8=$(run "$args" 8)
    j4=$(run "$args" 4)
    j1=$(run "$args" 1)
    d8=$(direct "$args" 8)
    d4=$(direct "$args" 4)
    d1=$(direct "$args" 1)
    seen="${seen:-} $j8 $j4 $j1"
    printf "%-54s %10s tps\n" "$name, -j 8 (one connection per thread)" "$j8"
    printf "%-54s %10s tps\n" "$name, -j 4 (two per thread)" "$j4"
    printf "%-54s %10s tps\n" "$name, -j 1 (all eight on one thread)" "$j1"
    ratios "$name, j4/j8" "$j4 $j1 $j8" " (target >= 0.9)"
    printf "%-54s %10s tps\n" "$name, unthrottled -j 8 / -j 4 / -j 1" "$d8 / $d4 / $d1"
    ratios "$name, unthrottled j4/j8" "$d4 $d1 $d8" ""
done
case "$seen" in *!*) echo "(! = clients aborted: a loop waited for a permit in the call and deadlocked)" ;; esac
