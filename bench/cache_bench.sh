#!/bin/sh
# cache_bench.sh - should kept permits (DBTHROTTLE_CACHE_PERMITS) be on by default? One run
# against a throwaway Redis and PostgreSQL on loopback, every arm interleaved with the others in
# rounds (the order rotates each round) so that the machine's drift cancels out:
#   off, on, off2   bursts: 16 worker processes (one connection each) run short queries back to
#                   back for 200 ms, then sit idle for 500 ms, BURSTS times, at a limit of 4, while
#                   one more process (the trickle) runs one query every 3 ms throughout
#                   (bench/cache_burst.c). off2 is off again: off2/off is the noise of a ratio.
#   probe           the first waiter's delay alone: a keeper runs a query every 2 ms at a limit
#                   of 1, a prober one every ~20 ms; with kept permits each probe waits for the
#                   keeper's revoke, without it the permit is free.
#   pgbench -S -c1  with the library's defaults (no DBTHROTTLE_CACHE_PERMITS set) against direct.
# Printed: medians over the rounds of each arm, the ratios on/off and off2/off, the Redis round
# trip (PING p50) measured in the same run, the holders Redis counts while idle, one
# `dbthrottle status` of each mode 200 ms into an idle period, and the most queries that ran at
# once at the server (advisory-lock slots; must be <= the limit). CACHE_BENCH_ROUNDS (default 4)
# and CACHE_BENCH_BURSTS (default 10 a run) set the length: about 2.5 minutes.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
lib=$top/build/libdbthrottle.so
drv=$top/build/bench/cache-burst
cli=$top/build/dbthrottle
work=$(mktemp -d /tmp/dbt-cache-bench-XXXXXX)
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
# The query of every process: a primary-key read (as pgbench -S) inside the lowest free advisory
# lock of 64 numbered slots; it returns the slot, so the highest slot seen is a lower bound of the
# queries that ran at once (L + 1 of them hold L + 1 distinct slots).
psql -qAtX >/dev/null <<'SQL'
CREATE FUNCTION cb_slot(id int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE s int; b int;
BEGIN
    FOR i IN 1..64 LOOP
        IF pg_try_advisory_lock(4242, i) THEN s := i; EXIT; END IF;
    END LOOP;
    SELECT abalance INTO b FROM pgbench_accounts WHERE aid = id;
    IF s IS NOT NULL THEN PERFORM pg_advisory_unlock(4242, s); END IF;
    RETURN coalesce(s, 65);
END $$;
SQL

LIMIT=4
ROUNDS=${CACHE_BENCH_ROUNDS:-4}
BURSTS=${CACHE_BENCH_BURSTS:-10}
url=redis://127.0.0.1:$rport
mode_of() { case $1 in on) echo on ;; *) echo off ;; esac; }
# Each run has a pool of its own, so that its status shows its processes only.
burst_arm() { # burst_arm ARM ROUND
    pool=cb-$1-$2
    key="dbthrottle:{$pool}:q:holders"
    status="env -u LD_PRELOAD $cli status $pool --redis $url --max-rows 20 >$work/status.$1.$2 2>&1"
    env LD_PRELOAD="$lib" DBTHROTTLE_REDIS_URL="$url" DBTHROTTLE_POOL="$pool" \
        DBTHROTTLE_MAX_QUERIES=$LIMIT DBTHROTTLE_CACHE_PERMITS="$(mode_of "$1")" DBTHROTTLE_LOG_LEVEL=error \
        DBTHROTTLE_WAIT_TIMEOUT=30s "$drv" burst 16 "$BURSTS" 200 500 3000 "$rport" "$key" "$status" \
        >"$work/burst.$1.$2"
}
probe_arm() { # probe_arm MODE ROUND
    env LD_PRELOAD="$lib" DBTHROTTLE_REDIS_URL="$url" DBTHROTTLE_POOL="cp-$1-$2" \
        DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_CACHE_PERMITS="$1" DBTHROTTLE_LOG_LEVEL=error \
        "$drv" probe 20000 60 >"$work/probe.$1.$2"
}
tps() { sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1; }

echo "dbthrottle: kept permits (DBTHROTTLE_CACHE_PERMITS) off and on, one run, $ROUNDS interleaved rounds (loopback)"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    "$drv" rtt "$rport" 2000 >"$work/rtt.$r"
    case $((r % 3)) in
    1) order="off on off2" ;;
    2) order="on off2 off" ;;
    0) order="off2 off on" ;;
    esac
    for arm in $order; do burst_arm "$arm" "$r"; done
    if [ $((r % 2)) -eq 1 ]; then order="off on"; else order="on off"; fi
    for m in $order; do probe_arm "$m" "$r"; done
    [ "$r" -le 2 ] && {
        if [ "$r" -eq 1 ]; then order="direct defaults"; else order="defaults direct"; fi
        for m in $order; do
            if [ "$m" = direct ]; then
                echo "tps=$(pgbench -n -S -c 1 -j 1 -T 5 2>&1 | tps)" >"$work/pgb.$m.$r"
            else
                echo "tps=$(env LD_PRELOAD="$lib" DBTHROTTLE_REDIS_URL="$url" DBTHROTTLE_MAX_QUERIES=1000 \
                    pgbench -n -S -c 1 -j 1 -T 5 2>&1 | tps)" >"$work/pgb.$m.$r"
            fi
        done
    }
    r=$((r + 1))
done

# med FILES KEY: the median over the rounds of KEY's values in FILES.
med() {
    k=$1
    shift
    sed -n "s/^$k=//p" "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# list FILES KEY: the values over the rounds, in round order.
list() {
    k=$1
    shift
    sed -n "s/^$k=//p" "$@" | tr '\n' ' ' | sed 's/ $//'
}
most() {
    k=$1
    shift
    sed -n "s/^$k=//p" "$@" | sort -g | tail -1
}
rtt=$(med rtt_us "$work"/rtt.*)
row() { # row LABEL KEY UNIT: off, on, off2 medians and the two ratios
    off=$(med "$2" "$work"/burst.off.*)
    on=$(med "$2" "$work"/burst.on.*)
    off2=$(med "$2" "$work"/burst.off2.*)
    echo "$1 $off $on $off2 $3" | awk '{ u = $5; printf "%-40s %9.1f %9.1f %9.1f %s   on/off %.3f  off2/off %.3f\n", $1, $2, $3, $4, u, ($2 > 0 ? $3 / $2 : 0), ($2 > 0 ? $4 / $2 : 0) }'
}
printf "%-58s %10s us (rounds: %s)\n" "Redis PING round trip (RTT), p50" "$rtt" "$(list rtt_us "$work"/rtt.*)"
echo
echo "bursts of 16 processes (200 ms) and 500 ms idle, limit $LIMIT, trickle 1 query / 3 ms; medians of $ROUNDS rounds x $BURSTS bursts"
printf "%-40s %9s %9s %9s\n" "" off on off2
row burst_queries/s burst_qps q/s
printf "%-40s %s | %s | %s\n" "  (rounds: off | on | off2)" "$(list burst_qps "$work"/burst.off.*)" "$(list burst_qps "$work"/burst.on.*)" "$(list burst_qps "$work"/burst.off2.*)"
row trickle_queries/s trickle_qps q/s
row trickle_latency_idle_p50 trickle_idle_p50_us us
row trickle_latency_idle_p99 trickle_idle_p99_us us
row trickle_latency_in_burst_p50 trickle_burst_p50_us us
row trickle_latency_in_burst_p99 trickle_burst_p99_us us
row first_query_rank1 first_rank1_us us
row first_query_rank$((LIMIT - 1)) first_rank$((LIMIT - 1))_us us
row first_query_rank$LIMIT first_rank${LIMIT}_us us
row first_query_rank$((LIMIT + 1)) first_rank$((LIMIT + 1))_us us
row first_query_rank16 first_rank16_us us
for ms in 10 25 50 75 100 200 400; do row "holders_${ms}ms_into_idle" "idle_holders_${ms}ms" ""; done
row holders_most_after_100ms_idle idle_holders_max_after_100ms ""
echo "$(med first_rank${LIMIT}_us "$work"/burst.on.*) $(med first_rank${LIMIT}_us "$work"/burst.off.*) $(med first_rank${LIMIT}_us "$work"/burst.off2.*) $rtt" | awk -v L=$LIMIT '{
    printf "%-58s %10.1f us = %.2f RTT (off2 - off: %.1f us = %.2f RTT; target <= 1 RTT)\n", "first waiter when a burst begins (rank " L " first query), on - off", $1 - $2, ($1 - $2) / $4, $3 - $2, ($3 - $2) / $4 }'

pon=$(med probe_p50_us "$work"/probe.on.*)
poff=$(med probe_p50_us "$work"/probe.off.*)
echo
printf "%-58s %10s us off, %s us on (rounds off: %s; on: %s)\n" "probe (limit 1, a keeper every 2 ms), p50" "$poff" "$pon" \
    "$(list probe_p50_us "$work"/probe.off.*)" "$(list probe_p50_us "$work"/probe.on.*)"
printf "%-58s %10s us off, %s us on\n" "probe p90" "$(med probe_p90_us "$work"/probe.off.*)" "$(med probe_p90_us "$work"/probe.on.*)"
echo "$pon $poff $rtt" | awk '{ printf "%-58s %10.1f us = %.2f RTT (target <= 1 RTT)\n", "first waiter behind a kept permit, extra delay (on - off)", $1 - $2, ($1 - $2) / $3 }'

echo
dd=$(list tps "$work"/pgb.defaults.*)
di=$(list tps "$work"/pgb.direct.*)
printf "%-58s %10s tps (runs: %s)\n" "pgbench -S -c1 direct" "$(med tps "$work"/pgb.direct.*)" "$di"
printf "%-58s %10s tps (runs: %s)\n" "pgbench -S -c1 with the library's defaults" "$(med tps "$work"/pgb.defaults.*)" "$dd"
echo "$(med tps "$work"/pgb.defaults.*) $(med tps "$work"/pgb.direct.*)" | awk '{ printf "%-58s %10.2f (target >= 0.9)\n", "  defaults / direct", $1 / $2 }'

echo
mx=$(most max_slot "$work"/burst.* )
mp=$(most probe_max_slot "$work"/probe.*)
er=$(most errors "$work"/burst.*)
printf "%-58s %10s (limit %s; off %s, on %s) %s\n" "most queries at once at the server, bursts" "$mx" "$LIMIT" \
    "$(most max_slot "$work"/burst.off*)" "$(most max_slot "$work"/burst.on.*)" "$([ "$mx" -le $LIMIT ] && echo ok || echo OVER THE LIMIT)"
printf "%-58s %10s (limit 1) %s\n" "most queries at once at the server, probe" "$mp" "$([ "$mp" -le 1 ] && echo ok || echo OVER THE LIMIT)"
printf "%-58s %10s\n" "failed queries (most in one run)" "$er"
for arm in off on; do
    echo
    echo "dbthrottle status, 200 ms into an idle period, $arm (round 1):"
    sed 's/^/    /' "$work/status.$arm.1" | head -20
done
[ "$mx" -le $LIMIT ] && [ "$mp" -le 1 ] && [ "$er" -eq 0 ]
