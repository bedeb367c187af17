#!/bin/sh
# run.sh - `make bench-shadow`: what shadow mode (DBTHROTTLE_MODE=shadow) costs a command, against enforcing
# and against no library at all. pgbench -S against a throwaway Redis and PostgreSQL, on loopback
# and with both behind a delay-proxy (bench/delay_proxy.c) at SHADOW_RTT_MS (0.5) ms round trip:
#   -c1 at a limit of 64   nothing would wait: the uncontended path (kept permits, the default)
#   -c8 at a limit of 4    half would wait: enforcing queues them, shadow runs them at once
# Arms direct, enforce and shadow, interleaved in SHADOW_ROUNDS (3) rounds of SHADOW_SECONDS (4)
# each, the order rotating. Printed per workload and distance: the median tps of each arm, the
# ratios shadow/direct, enforce/direct and shadow/enforce, and the script calls Redis ran per
# statement (INFO commandstats: EVALSHA and BLPOP) in the shadow and enforce arms, and the Redis
# round trip measured (PING p50). About 3 minutes.
set -u
. "$(dirname "$0")/../../tests/support/lib.sh"
harness_begin shadow-bench
proxy=$top/build/bench/delay-proxy
ROUNDS=${SHADOW_ROUNDS:-3}
SECS=${SHADOW_SECONDS:-4}
RTT_MS=${SHADOW_RTT_MS:-0.5}
redis_start
pg_start
pgbench -i -q -s 1 >/dev/null 2>&1
one_way_us=$(awk -v r="$RTT_MS" 'BEGIN { printf "%d", r * 500 }')
# proxy TARGET_PORT: a delay-proxy in front of it (half the round trip each way); its port.
proxy() {
    "$proxy" 0 127.0.0.1 "$1" "$one_way_us" >"$work/proxy.$1" 2>"$work/proxy.$1.err" &
    echo $! >>"$work/pids"
    wait_until 5 "[ -s '$work/proxy.$1' ]" || { echo "delay-proxy did not start" >&2; exit 1; }
    cat "$work/proxy.$1"
}
redis_far=$(proxy "$rport")
pg_far=$(proxy "$PGPORT")
script_calls() {
    rcli info commandstats | tr -d '\r' |
        awk -F'[:=,]' '$1 ~ /^cmdstat_(evalsha|blpop)$/ { s += $3 } END { print s + 0 }'
}
# run DIST WORKLOAD ARM ROUND: one pgbench; its tps in $work/tps.DIST.WORKLOAD.ARM, and for the
# throttled arms the Redis calls per statement in $work/calls.DIST.WORKLOAD.ARM.
run() {
    if [ "$1" = 0 ]; then r_redis=$rport r_pg=$PGPORT; else r_redis=$redis_far r_pg=$pg_far; fi
    case $2 in c1) r_c=1 r_limit=64 ;; *) r_c=8 r_limit=4 ;; esac
    case $3 in
    direct) r_env= ;;
    enforce) r_env="LD_PRELOAD=$lib" ;;
    *) r_env="LD_PRELOAD=$lib DBTHROTTLE_MODE=shadow" ;;
    esac
    c0=$(script_calls)
    out=$(env $r_env DBTHROTTLE_REDIS_URL="redis://127.0.0.1:$r_redis" DBTHROTTLE_POOL="sb-$1-$2-$3-$4" \
        DBTHROTTLE_MAX_QUERIES=$r_limit DBTHROTTLE_LOG_LEVEL=error PGPORT="$r_pg" \
        pgbench -n -S -c "$r_c" -j "$r_c" -T "$SECS" 2>&1)
    tps=$(echo "$out" | awk '/^tps = / { printf "%.0f", $3 }')
    tx=$(echo "$out" | awk '/number of transactions actually processed/ { print $NF }' | cut -d/ -f1)
    [ -n "$tps" ] || { echo "pgbench failed ($1 $2 $3): $out" >&2; exit 1; }
    echo "$tps" >>"$work/tps.$1.$2.$3"
    [ "$3" = direct ] || awk -v c="$(($(script_calls) - c0))" -v t="$tx" \
        'BEGIN { printf "%.3f\n", t ? c / t : 0 }' >>"$work/calls.$1.$2.$3"
}
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
arms="direct enforce shadow"
r=0
while [ $r -lt "$ROUNDS" ]; do
    set -- $arms
    i=0
    while [ $i -lt $((r % 3)) ]; do set -- "$@" "$1"; shift; i=$((i + 1)); done
    for dist in 0 "$RTT_MS"; do
        for w in c1 c8; do
            for arm in "$@"; do run "$dist" "$w" "$arm" "$r"; done
        done
    done
    r=$((r + 1))
done
# the round trip measured: Redis PING p50 over 200 pings (bench/cache_burst.c), loopback and far
rtt_near=$("$top/build/bench/cache-burst" rtt "$rport" 200 | sed -n 's/^rtt_us=//p')
rtt_far=$("$top/build/bench/cache-burst" rtt "$redis_far" 200 | sed -n 's/^rtt_us=//p')
echo "shadow mode's cost: pgbench -S, median tps of $ROUNDS rounds of $SECS s (load $(cut -d' ' -f1 /proc/loadavg))"
printf '%-6s %-16s %8s %8s %8s %8s %8s %8s %10s %10s\n' rtt workload direct enforce shadow \
    sh/dir en/dir sh/en "calls(sh)" "calls(en)"
for dist in 0 "$RTT_MS"; do
    for w in c1 c8; do
        d=$(median "$work/tps.$dist.$w.direct")
        e=$(median "$work/tps.$dist.$w.enforce")
        s=$(median "$work/tps.$dist.$w.shadow")
        label=$([ "$w" = c1 ] && echo "-c1 at 64" || echo "-c8 at 4")
        printf '%-6s %-16s %8s %8s %8s %8.2f %8.2f %8.2f %10s %10s\n' \
            "$([ "$dist" = 0 ] && echo loop || echo "${dist}ms")" "$label" "$d" "$e" "$s" "$(echo "$s $d" | awk '{ print $1 / $2 }')" \
            "$(echo "$e $d" | awk '{ print $1 / $2 }')" "$(echo "$s $e" | awk '{ print $1 / $2 }')" \
            "$(median "$work/calls.$dist.$w.shadow")" "$(median "$work/calls.$dist.$w.enforce")"
    done
done
echo "Redis PING p50: ${rtt_near:-?} us on loopback, ${rtt_far:-?} us through the delay"
