#!/bin/sh
# pg_bench.sh - the interposer's costs, in one run against a throwaway Redis, PostgreSQL and
# PgBouncer on loopback: pgbench -S -c1 direct and throttled (added latency in Redis round trips),
# -c16 throttled at 4 (with and without local handover) beside PgBouncer (transaction mode,
# pool_size 4) and direct -c4, 32 clients of pg_sleep(0.05) at limit 4 against the ideal
# 80/s, and 32 separate psql processes x 10 pg_sleep(0.05) at limit 4 beside PgBouncer pool 4 on
# the same workload. PG_BENCH_SECONDS sets each pgbench run's length (default 10).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
lib=$top/build/libdbthrottle.so
work=$(mktemp -d /tmp/dbt-bench-XXXXXX)
chmod 755 "$work"
cleanup() {
    [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null
    [ -n "${bouncer_pid:-}" ] && kill "$bouncer_pid" 2>/dev/null
    sh "$top/tools/pgtmp.sh" stop "$work/pg" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
port() { echo $(( ( $(od -An -N2 -tu2 /dev/urandom) % 30000 ) + 20000 )); }
rport=$(port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.05; done
PGPORT=$(sh "$top/tools/pgtmp.sh" start "$work/pg")
export PGHOST=127.0.0.1 PGPORT PGUSER=postgres PGDATABASE=postgres
pgbench -i -q -s 1 >/dev/null 2>&1

bport=$(port)
cat >"$work/pgbouncer.ini" <<INI
[databases]
postgres = host=127.0.0.1 port=$PGPORT dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $work/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 100
logfile = $work/pgbouncer.log
pidfile = $work/pgbouncer.pid
INI
echo '"postgres" ""' >"$work/users.txt"
chmod 644 "$work/pgbouncer.ini" "$work/users.txt"
if [ "$(id -u)" -eq 0 ]; then
    chown postgres "$work"
    runuser -u postgres -- pgbouncer -q "$work/pgbouncer.ini" 2>"$work/runuser.err" &
else
    pgbouncer -q "$work/pgbouncer.ini" &
fi
bouncer_pid=$!
i=0
until psql -p "$bport" -qAt -c "select 1" >/dev/null 2>&1 || [ $i -ge 100 ]; do sleep 0.05; i=$((i + 1)); done

tps() { sed -n 's/^tps = \([0-9]*\).*/\1/p' | head -1; }
lat() { sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' | head -1; }
throttled() { env LD_PRELOAD="$lib" DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$rport "$@"; }

rtt_us=$(cat <<PY | /usr/bin/python3
import socket, time
s = socket.create_connection(("127.0.0.1", $rport)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
v = []
for i in range(3000):
    t = time.perf_counter(); s.sendall(b"PING\r\n"); s.recv(64); v.append(time.perf_counter() - t)
v.sort(); print("%.1f" % (v[len(v) // 2] * 1e6))
PY
)
echo "dbthrottle interposer benchmark (loopback; one run)"
printf "%-58s %10s us\n" "Redis PING round trip, p50" "$rtt_us"

T=${PG_BENCH_SECONDS:-10}
d1=$(pgbench -n -S -c 1 -j 1 -T $T 2>&1)
t1=$(throttled DBTHROTTLE_MAX_QUERIES=1000 pgbench -n -S -c 1 -j 1 -T $T 2>&1)
k1=$(throttled DBTHROTTLE_MAX_QUERIES=1000 DBTHROTTLE_CACHE_PERMITS=on pgbench -n -S -c 1 -j 1 -T $T 2>&1)
p1=$(pgbench -n -S -c 1 -j 1 -T $T -p "$bport" 2>&1)
dl=$(echo "$d1" | lat); tl=$(echo "$t1" | lat); kl=$(echo "$k1" | lat)
printf "%-58s %10s tps, %s ms\n" "pgbench -S -c1 direct" "$(echo "$d1" | tps)" "$dl"
printf "%-58s %10s tps, %s ms\n" "pgbench -S -c1 throttled (limit 1000)" "$(echo "$t1" | tps)" "$tl"
printf "%-58s %10s tps, %s ms\n" "pgbench -S -c1 throttled, permits kept (CACHE_PERMITS)" "$(echo "$k1" | tps)" "$kl"
printf "%-58s %10s tps, %s ms\n" "pgbench -S -c1 through PgBouncer" "$(echo "$p1" | tps)" "$(echo "$p1" | lat)"
echo "$dl $tl $rtt_us" | awk '{ printf "%-58s %10.1f us = %.2f RTT (target <= 1.2)\n", "added latency per transaction", ($2 - $1) * 1000, ($2 - $1) * 1000 / $3 }'
echo "$(echo "$k1" | tps) $(echo "$d1" | tps)" | awk '{ printf "%-58s %10.2f (target >= 0.9)\n", "kept permits: throttled -c1 / direct", $1 / $2 }'
echo "$(echo "$t1" | tps) $(echo "$d1" | tps)" | awk '{ printf "%-58s %10.2f (target >= 0.9)\n", "the defaults: throttled -c1 / direct", $1 / $2 }'

c16=$(throttled DBTHROTTLE_MAX_QUERIES=4 pgbench -n -S -c 16 -j 16 -T $T 2>&1 | tps)
c16r=$(throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOCAL_HANDOVER=off pgbench -n -S -c 16 -j 16 -T $T 2>&1 | tps)
k16=$(throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_CACHE_PERMITS=on pgbench -n -S -c 16 -j 16 -T $T 2>&1 | tps)
b16=$(pgbench -n -S -c 16 -j 16 -T $T -p "$bport" 2>&1 | tps)
d4=$(pgbench -n -S -c 4 -j 4 -T $T 2>&1 | tps)
printf "%-58s %10s tps\n" "pgbench -S -c16 throttled to 4" "$c16"
printf "%-58s %10s tps\n" "pgbench -S -c16 throttled to 4, LOCAL_HANDOVER=off" "$c16r"
printf "%-58s %10s tps\n" "pgbench -S -c16 throttled to 4, permits kept" "$k16"
printf "%-58s %10s tps\n" "pgbench -S -c16 through PgBouncer (transaction, pool 4)" "$b16"
printf "%-58s %10s tps\n" "pgbench -S -c4 direct" "$d4"
echo "$c16 $k16 $b16 $c16r" | awk '{ printf "%-58s %10.2f, kept permits %.2f, handover off %.2f (target >= 1.2)\n", "throttled / PgBouncer", $1 / $3, $2 / $3, $4 / $3 }'

echo "select pg_sleep(0.05);" >"$work/sleep.sql"
mkdir -p "$work/log"
s32=$(cd "$work/log" && throttled DBTHROTTLE_MAX_QUERIES=4 pgbench -n -c 32 -j 32 -T $T -f "$work/sleep.sql" -l 2>&1 | tps)
echo "$s32" | awk '{ printf "%-58s %10.1f /s = %.3f of 80 (target >= 0.97)\n", "32 clients of pg_sleep(0.05) at limit 4", $1, $1 / 80 }'
# The wait of each transaction is its latency less the 50 ms it holds; a FIFO queue makes each of
# the 32 wait (32 - 4) / 4 holds = 350 ms, every time.
cat "$work"/log/pgbench_log.* | /usr/bin/python3 -c '
import sys
rows = [l.split() for l in sys.stdin if len(l.split()) >= 6]
t0 = min(int(r[4]) for r in rows)
# the first second fills the queue: steady state only (column 5: the end time, epoch seconds)
w = sorted(max(0.0, int(r[2]) / 1000 - 50) for r in rows if int(r[4]) >= t0 + 1)
p = lambda q: w[min(len(w) - 1, int(q / 100 * len(w)))]
print("%-58s %10.1f ms (p50 %.1f ms; FIFO ideal 350 ms: %.2fx)" % ("  their wait p99", p(99), p(50), p(99) / 350))'

# 32 separate psql processes (a fleet of short-lived clients, each its own process: no handover
# inside a process helps them), each running 10 pg_sleep(0.05) in one session, throttled to 4
# beside the same through PgBouncer's pool of 4: the rate is 320 statements over the wall time
# from the first start to the last exit (connection set-up included, alike for both); ideal 80/s.
i=0
while [ $i -lt 10 ]; do echo "select pg_sleep(0.05);"; i=$((i + 1)); done >"$work/sleep10.sql"
# psql32 [ENV...]: the wall time in ms of the 32 processes, with ENV (and PGPORT) for each
psql32() {
    p0=$(date +%s%N)
    pids=
    i=0
    while [ $i -lt 32 ]; do
        env "$@" psql -qAtX -f "$work/sleep10.sql" >/dev/null 2>>"$work/psql32.err" &
        pids="$pids $!"
        i=$((i + 1))
    done
    for p in $pids; do wait "$p" || echo "psql $p failed" >>"$work/psql32.err"; done
    echo $((($(date +%s%N) - p0) / 1000000))
}
ms_thr=$(psql32 LD_PRELOAD="$lib" DBTHROTTLE_REDIS_URL="redis://127.0.0.1:$rport" DBTHROTTLE_MAX_QUERIES=4)
ms_pgb=$(psql32 PGPORT="$bport")
[ ! -s "$work/psql32.err" ] || { echo "# psql errors:"; head -5 "$work/psql32.err"; }
echo "$ms_thr" | awk '{ printf "%-58s %10.1f /s = %.3f of 80\n", "32 psql processes x 10 pg_sleep(0.05) throttled to 4", 320000 / $1, 4000 / $1 }'
echo "$ms_pgb" | awk '{ printf "%-58s %10.1f /s = %.3f of 80\n", "32 psql processes x 10 pg_sleep(0.05) through PgBouncer 4", 320000 / $1, 4000 / $1 }'
echo "$ms_thr $ms_pgb" | awk '{ printf "%-58s %10.2f (target >= 1.0)\n", "  throttled / PgBouncer", $2 / $1 }'
