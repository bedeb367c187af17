#!/bin/sh
# run.sh [CASE...] - the fault suite: libdbthrottle.so preloaded into real libpq workers, against a
# redis-server and a PostgreSQL this script starts (and stops) on free loopback ports, while the
# test kills, stops, stalls and cuts things. Each case prints what it checked; the last line is
# "N passed, N failed" and the exit status is non-zero on a failure. Cases: 1-10, default all.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
work=$(mktemp -d /tmp/dbt-faults-XXXXXX)
chmod 755 "$work"
cleanup() {
    for p in $(cat "$work"/pids 2>/dev/null); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    [ -n "${redis_pid:-}" ] && kill -9 "$redis_pid" 2>/dev/null
    command -v netns_cleanup >/dev/null && netns_cleanup
    pg_stop
    if [ -n "${DBT_FAULTS_KEEP:-}" ]; then echo "# kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

export DBTHROTTLE_LOG_LEVEL=${DBT_FAULTS_LOG_LEVEL:-warn}
redis_start
pg_start

# spawn OUT ENV... : starts a worker in the background with the preload; its pid in $spawned.
spawn() {
    out=$1
    shift
    env LD_PRELOAD="$preload" "$@" ${DBT_WRAP:-} "$worker" ${wargs:-} >"$out" 2>>"$work/workers.err" &
    spawned=$!
    spawned_list="${spawned_list:-} $spawned"
    echo "$spawned" >>"$work/pids"
}

for c in ${*:-1 2 3 4 5 6 7 8 9 10}; do
    spawned_list=
    . "$here/case$c.sh"
done

if [ -n "${DBT_SANITIZER_LOGS:-}" ]; then
    reports=$(find "$(dirname "$DBT_SANITIZER_LOGS")" -name "$(basename "$DBT_SANITIZER_LOGS")*" -size +0 2>/dev/null)
    check "no sanitizer report from any preloaded process${reports:+: $reports}" '[ -z "$reports" ]'
    for f in $reports; do head -40 "$f"; done
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
