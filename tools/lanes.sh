#!/bin/sh
# lanes.sh LANE... - runs make test's waiting stages in lanes at once: each LANE is a list of stage
# names, run one after another with `make stage-NAME`; the lanes run side by side. Most of these
# stages wait (on servers, leases, timeouts) far more than they compute, so three lanes on 2 cores
# take about as long as the longest one instead of the sum (27 minutes one after another).
#
# A line goes out as each stage ends ("stage NAME: N s, rc R, lane L"), with each lane's whole
# output in a file meanwhile; at the end the lanes' outputs are printed, the failed ones last (what
# CI keeps of a red run is its tail), then every stage's time. The exit status is non-zero when a
# stage failed; the other stages still run, so one run shows every failure. An interrupt stops
# every lane (each runs in a session of its own, so that the suites' own cleanups run).
set -u
make=${MAKE:-make}
dir=$(mktemp -d /tmp/dbt-lanes-XXXXXX)
n=0
pids=
stop() {
    for p in $pids; do kill -TERM -- "-$p" 2>/dev/null; done
    wait
    rm -rf "$dir"
    exit 1
}
trap stop HUP INT TERM
for lane in "$@"; do
    n=$((n + 1))
    # The lane: its stages one after another, each timed; "NAME SECONDS RC" per stage in laneN.times.
    setsid sh -c '
        lane=$1 n=$2 dir=$3 make=$4
        for s in $lane; do
            t0=$(date +%s)
            echo "==== lane $n: stage $s"
            $make --no-print-directory "stage-$s"
            rc=$?
            dt=$(($(date +%s) - t0))
            echo "$s $dt $rc" >>"$dir/lane$n.times"
            echo "stage $s: $dt s, rc $rc, lane $n" >&3
        done' lanes "$lane" "$n" "$dir" "$make" 3>&1 >"$dir/lane$n.log" 2>&1 &
    pids="$pids $!"
done
wait

ok_lanes=
bad_lanes=
i=0
for lane in "$@"; do
    i=$((i + 1))
    touch "$dir/lane$i.times"
    if awk '$3 != 0 { bad = 1 } END { exit !bad }' "$dir/lane$i.times" ||
        [ "$(wc -l <"$dir/lane$i.times")" -ne "$(echo $lane | wc -w)" ]; then
        bad_lanes="$bad_lanes $i"
    else
        ok_lanes="$ok_lanes $i"
    fi
done
for i in $ok_lanes $bad_lanes; do
    echo
    echo "======== lane $i ($(awk '{ s = s " " $1 } END { print substr(s, 2) }' "$dir/lane$i.times" 2>/dev/null))"
    cat "$dir/lane$i.log"
done
echo
echo "======== the lanes' stages"
i=0
for lane in "$@"; do
    i=$((i + 1))
    total=$(awk '{ t += $2 } END { print t + 0 }' "$dir/lane$i.times" 2>/dev/null)
    echo "lane $i: $total s: $(awk '{ printf "%s%s %d s%s", sep, $1, $2, ($3 ? " FAILED" : ""); sep = ", " }' "$dir/lane$i.times" 2>/dev/null)"
done
rm -rf "$dir"
[ -z "$bad_lanes" ] || {
    echo "failed in lane(s):$bad_lanes"
    exit 1
}
