#!/bin/sh
# demo.sh - `make demo`: a throwaway Redis and PostgreSQL, 16 clients throttled to 4 queries at
# once with the trace on, and the most statements the server saw running at once.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/dbt-demo-XXXXXX)
chmod 755 "$work"
cleanup() {
    [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null
    sh "$top/tools/pgtmp.sh" stop "$work/pg" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
rport=$(( ( $(od -An -N2 -tu2 /dev/urandom) % 30000 ) + 20000 ))
redis-server --port "$rport" --bind 127.0.0.1 --save "" --dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.05; done
PGPORT=$(sh "$top/tools/pgtmp.sh" start "$work/pg")
export PGHOST=127.0.0.1 PGPORT PGUSER=postgres PGDATABASE=postgres
psql -qAt -c "alter system set log_min_duration_statement = 0" -c "alter system set log_line_prefix = '%m '" \
    -c "select pg_reload_conf()" >/dev/null
echo "select pg_sleep(0.1);" >"$work/q.sql"

echo "== 16 pgbench clients, 5 queries of 100 ms each, throttled to 4 at once =="
echo "   DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$rport DBTHROTTLE_MAX_QUERIES=4 \\"
echo "   LD_PRELOAD=$top/build/libdbthrottle.so pgbench -n -c 16 -j 16 -t 5 -f q.sql"
echo
start=$(date +%s.%N)
DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$rport DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=info \
    DBTHROTTLE_LOG="$work/trace.log" LD_PRELOAD="$top/build/libdbthrottle.so" \
    pgbench -n -c 16 -j 16 -t 5 -f "$work/q.sql" >"$work/pgbench.out" 2>&1
end=$(date +%s.%N)
echo "== the trace (first 8 of $(wc -l <"$work/trace.log") lines) =="
head -8 "$work/trace.log"
echo
grep 'statement: select pg_sleep(0.1)' "$work/pg/server.log" >"$work/stmts" || true
max=$(awk '{ split($2, t, ":"); end = t[1] * 3600 + t[2] * 60 + t[3];
    for (i = 1; i <= NF; i++) if ($i == "duration:") d = $(i + 1) / 1000;
    printf "%.6f 1\n%.6f -1\n", end - d, end - 0.001 }' "$work/stmts" | sort -k1,1n -k2,2n |
    awk '{ cur += $2; if (cur > max) max = cur } END { print max + 0 }')
echo "== result =="
echo "statements run:                       $(wc -l <"$work/stmts")"
echo "grants in the trace:                  $(grep -c event=grant "$work/trace.log")"
echo "largest concurrency the server saw:   $max   (limit 4)"
echo "wall time:                            $(echo "$start $end" | awk '{ printf "%.2f s (ideal 80 x 0.1 s / 4 = 2.00 s)", $2 - $1 }')"
