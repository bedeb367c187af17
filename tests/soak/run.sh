#!/bin/sh
# run.sh - the soak (make soak; not in CI): 32 client threads in one worker process under
# MAX_QUERIES=4 for SOAK_SECONDS (default 600), Redis restarted every minute, plus 8 more worker
# processes for contention. Prints the observed worker's RSS and descriptor count after a warm-up
# and at the end: neither may grow (a leak per query or per reconnect would show in thousands of
# them). Exit status non-zero if they did.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
secs=${SOAK_SECONDS:-600}
harness_begin soak
suite_cleanup() {
    [ -n "${obs:-}" ] && kill -9 "$obs" 2>/dev/null
    for p in ${others:-}; do kill -9 "$p" 2>/dev/null; done
}
redis_start
pg_start
counter_install
export PGAPPNAME=soak DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LEASE=2s DBTHROTTLE_REDIS_TIMEOUT=300ms \
    DBTHROTTLE_LOG_LEVEL=error
env LD_PRELOAD="$preload" "$worker" -T 32 -n 0 -s 1 >"$work/obs.out" 2>"$work/obs.err" &
obs=$!
others=
i=0
while [ $i -lt 8 ]; do
    env LD_PRELOAD="$preload" "$worker" -n 0 -s 2 >/dev/null 2>&1 &
    others="$others $!"
    i=$((i + 1))
done
sample() { # RSS (kB) and descriptors of the observed worker
    echo "$(awk '/^VmRSS/ { print $2 }' "/proc/$obs/status") $(ls "/proc/$obs/fd" | wc -l)"
}
sleep 20 # warm-up: every connection and buffer made
set -- $(sample)
rss0=$1 fd0=$2
mark
start=$(now_ms)
restarts=0
while [ $(( ($(now_ms) - start) / 1000 )) -lt "$secs" ]; do
    sleep 60
    redis_kill
    redis_start
    restarts=$((restarts + 1))
done
sleep 20 # settle after the last restart
set -- $(sample)
rss1=$1 fd1=$2
n=$(probes soak)
kill -TERM "$obs"
wait "$obs"
echo "soak: ${secs}s, $n probes, $restarts Redis restarts, most at once $(max_conc soak) (limit 4)"
echo "soak: observed worker (32 threads): RSS ${rss0} kB -> ${rss1} kB, descriptors $fd0 -> $fd1"
cat "$work/obs.out"
# RSS may wobble by allocator pages; a leak per query (hundreds of thousands) would not.
[ "$fd1" -le "$fd0" ] && [ "$rss1" -le $((rss0 + 2048)) ]
