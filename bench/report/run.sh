#!/bin/sh
# run.sh - `make bench-report`: the honesty check of dbthrottle report (issue 33), and what shadow
# mode's sample costs Redis. Against a throwaway Redis and PostgreSQL, on loopback and with both
# behind a delay-proxy (bench/delay_proxy.c) at REPORT_RTT_MS (0.5) ms round trip:
#   6 workers (tests/support/report_worker.py), each REPORT_N (200) statements of a pg_sleep of
#   5-25 ms and a pause of 10-50 ms, run in shadow mode; `dbthrottle report --limits 2`; the same
#   statements and pauses (same seeds) run enforced at a limit of 2, sampled too
#   (DBTHROTTLE_SAMPLE=always).
# Printed per distance: the predicted and measured wait p99 and share of statements that waited
# (measured: the latency each statement had beyond its sleep and the run's least overhead; waited:
# more than 1 ms), their ratios, and whether both are within 25 %; then the same for the enforced
# run's own sample replayed at 2, with the wait the report calls the limit's own (per command)
# against the mean wait measured. Then sample.lua's cost to
# Redis: the microseconds of Redis' one core per call and per hold sampled (INFO commandstats,
# chunks sent as the library sends them), on a small sample and at the cap. Exits 1 when a ratio is
# off by more than 25 %. About 2 minutes; run it on a quiet machine: a starved one adds delays
# to the tail that no replay of a rule can know.
set -u
. "$(dirname "$0")/../../tests/support/lib.sh"
harness_begin report-bench
proxy=$top/build/bench/delay-proxy
N=${REPORT_N:-200}
RTT_MS=${REPORT_RTT_MS:-0.5}
WORKERS=6
py=/usr/bin/python3
cli=$top/build/dbthrottle
redis_start
pg_start
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
# workers DIST POOL MODE: the 6 workers; their lines in $work/w.POOL.<seed>
workers() {
    if [ "$1" = 0 ]; then w_redis=$rport w_pg=$PGPORT; else w_redis=$redis_far w_pg=$pg_far; fi
    w_pids=
    for s in $(seq 1 $WORKERS); do
        env LD_PRELOAD="$lib" DBTHROTTLE_REDIS_URL="redis://127.0.0.1:$w_redis" PGPORT="$w_pg" \
            DBTHROTTLE_POOL="$2" DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_MODE="$3" DBTHROTTLE_LOG_LEVEL=error \
            DBTHROTTLE_SAMPLE="${4:-shadow}" \
            $py "$top/tests/support/report_worker.py" "$s" "$N" "$work/w.$2.$s" 2>"$work/w.$2.$s.err" &
        w_pids="$w_pids $!"
        echo $! >>"$work/pids"
    done
    for p in $w_pids; do wait "$p" || { echo "a worker failed: $(cat "$work"/w."$2".*.err | head -c 400)" >&2; exit 1; }; done
}
fail=0
enforced_rows=
printf '%-9s %12s %12s %6s   %10s %10s %6s   %s\n' distance "p99 pred" "p99 meas" ratio "waited pred" "waited meas" ratio verdict
for dist in 0 "$RTT_MS"; do
    workers "$dist" "rb-shadow-$dist" shadow
    pred=$("$cli" report "rb-shadow-$dist" --limits 2 --wait-timeout 1m --json --redis "redis://127.0.0.1:$rport" |
        $py -c 'import json, sys
l = json.load(sys.stdin)["limits"][0]
print("%.2f" % l["wait_p99_ms"], "%.3f" % l["waited_share"])')
    workers "$dist" "rb-enforce-$dist" enforce always
    meas=$(cat "$work"/w.rb-enforce-"$dist".[0-9]* | $py -c 'import sys
over = sorted(float(l.split()[0]) - float(l.split()[1]) for l in sys.stdin if l.strip())
base = over[len(over) // 20]
waits = sorted(max(0.0, o - base) * 1000 for o in over)
i = max(0, -(-99 * len(waits) // 100) - 1)
print("%.2f" % waits[i], "%.3f" % (sum(w > 1.0 for w in waits) / len(waits)), "%.3f" % (sum(waits) / len(waits)))')
    # the enforced run's own sample (DBTHROTTLE_SAMPLE=always), replayed at its limit: its
    # p99 and share, and the limit's own wait per command against the measured mean
    own=$("$cli" report "rb-enforce-$dist" --limits 2 --wait-timeout 1m --json --redis "redis://127.0.0.1:$rport" |
        $py -c 'import json, sys
r = json.load(sys.stdin)
l, e = r["limits"][0], r["enforced"]
print("%.2f" % l["wait_p99_ms"], "%.3f" % l["waited_share"], "%.3f" % (e["queued_total_ms"] / e["commands"]))')
    enforced_rows="$enforced_rows$dist $own $meas
"
    set -- $pred $meas
    line=$($py -c "
p99p, wp, p99m, wm = $1, $2, $3, $4
r1, r2 = p99p / p99m, wp / wm
ok = abs(r1 - 1) <= 0.25 and abs(r2 - 1) <= 0.25
print('%-9s %12s %12s %6.2f   %10s %10s %6.2f   %s' % ('$( [ "$dist" = 0 ] && echo loopback || echo "${dist} ms")', '%.2f ms' % p99p, '%.2f ms' % p99m, r1, '%.3f' % wp, '%.3f' % wm, r2, 'within 25 %' if ok else 'OFF BY MORE THAN 25 %'))")
    echo "$line"
    case $line in *OFF*) fail=1 ;; esac
done

# The same comparison for the enforced runs' own samples (DBTHROTTLE_SAMPLE=always), and the
# wait the report calls the limit's own (per command) against the mean wait measured.
echo
printf '%-9s %12s %12s %6s   %10s %10s %6s   %9s %9s %6s   %s\n' "enforced" "p99 replay" "p99 meas" ratio "waited rep" "waited meas" ratio "own/cmd" "mean meas" ratio verdict
printf '%s' "$enforced_rows" | while read -r dist p99r wr own p99m wm meanm; do
    line=$($py -c "
p99r, wr, own, p99m, wm, meanm = $p99r, $wr, $own, $p99m, $wm, $meanm
r1, r2, r3 = p99r / p99m, wr / wm, own / meanm
ok = all(abs(r - 1) <= 0.25 for r in (r1, r2, r3))
print('%-9s %12s %12s %6.2f   %10s %10s %6.2f   %9s %9s %6.2f   %s' % ('$( [ "$dist" = 0 ] && echo loopback || echo "${dist} ms")', '%.2f ms' % p99r, '%.2f ms' % p99m, r1, '%.3f' % wr, '%.3f' % wm, r2, '%.2f ms' % own, '%.2f ms' % meanm, r3, 'within 25 %' if ok else 'OFF BY MORE THAN 25 %'))")
    echo "$line"
    case $line in *OFF*) echo off >"$work/enforced.off" ;; esac
done
[ ! -e "$work/enforced.off" ] || fail=1

# sample.lua's cost: chunks of DBT_SAMPLE_CHUNK holds, as the library sends them (EVALSHA of the
# script's text as sent, build/gen/scripts/sample.lua), on a pool of its own; Redis' usec per call
# (INFO commandstats), and per hold.
config_h=$top/preload/base/include/config.h
chunk_n=$(sed -n 's/^#define DBT_SAMPLE_CHUNK  *\([0-9]*\)$/\1/p' "$config_h")
cap=$(sed -n 's/^#define DBT_SAMPLE_CAP  *\([0-9]*\)$/\1/p' "$config_h")
keys=$(awk '$1 == "key" && $0 !~ /sent=no/ { printf "dbthrottle:{rbcost}:q:%s ", $3 }' "$top/lua/protocol/keys.def")
nkeys=$(echo $keys | wc -w)
# lines as sample.c writes them: ages in us, an 8-hex connection, wait and hold in us
chunk=$($py -c "print(''.join('%d %08x 512 12345 1 0 \\n' % (1000 * ($chunk_n - i), 0x9e3779b1 * (i % 9) & 0xffffffff) for i in range($chunk_n)), end='')")
sha=$(rcli script load "$(cat "$top/build/gen/scripts/sample.lua")")
cost() { # cost CALLS FIRST: CALLS chunks from serial FIRST; prints Redis' usec per call
    rcli config resetstat >/dev/null
    i=0
    while [ $i -lt "$1" ]; do
        # shellcheck disable=SC2086
        rcli evalsha "$sha" "$nkeys" $keys "dbthrottle:{rbcost}:wake:" q 10000 30000 "" 0 0 "" "" \
            00000000000000bb $(($2 + i * chunk_n)) "$chunk_n" "$chunk" 0 "$i" "" >/dev/null
        i=$((i + 1))
    done
    rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '$1 == "cmdstat_evalsha" { printf "%.0f", $7 }'
}
small=$(cost 40 0)
# fill to the cap, then measure there (each call then also trims as many as it adds)
cost $((cap / chunk_n + 1)) 100000 >/dev/null
atcap=$(cost 40 10000000)
mem=$(rcli memory usage "dbthrottle:{rbcost}:q:sample")
echo
echo "sample.lua, a chunk of $chunk_n holds: ${small} us of Redis per call ($(awk -v c="$small" -v n="$chunk_n" 'BEGIN { printf "%.1f", c / n }') us per hold) on a small sample;"
echo "  ${atcap} us per call ($(awk -v c="$atcap" -v n="$chunk_n" 'BEGIN { printf "%.1f", c / n }') us per hold) at the cap ($(rcli zcard "dbthrottle:{rbcost}:q:sample") chunks of $chunk_n holds, $mem bytes)"
exit $fail
