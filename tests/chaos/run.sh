#!/bin/sh
# run.sh - make chaos: seeded, randomized fault schedules against a real Redis and PostgreSQL,
# judged from outside (docs/chaos.md). Jepsen's shape: a workload of real clients, a nemesis
# drawing its faults from a seed, a history recorded from outside the library (PostgreSQL's log of
# every statement's start and end, the faults' times, Redis' keys at the end), and a checker that
# judges only that history.
#
#   SEED=N            replays that one run (its faults at the same offsets)
#   CHAOS_SEEDS="a b" those runs
#   CHAOS_RUNS=N      else N runs with random seeds (default 3)
#   CHAOS_SECONDS=N   each run's length (default 30)
#   CHAOS_MODE=closed|open  forces the mode the seed would draw
#   CHAOS_NEMESIS=off       the same workload without faults (the control: it must pass)
#   CHAOS_LOG_LEVEL=debug   the library's log level in the workers (info by default)
#
# One PostgreSQL serves every run (the probe logs its own start and end); each run has its own
# Redis, delay proxy and workers (tests/chaos/orchestrate.py), then tests/chaos/check.py prints its
# table and verdict. A failing run prints the line that replays it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
harness_begin chaos
# Debian's python3, whose psycopg2 and psycopg the workers use (another python3 may come first in
# PATH); no __pycache__ left in the source tree.
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
seconds=${CHAOS_SECONDS:-30}
if [ -n "${SEED:-}" ]; then
    seeds=$SEED
elif [ -n "${CHAOS_SEEDS:-}" ]; then
    seeds=$CHAOS_SEEDS
else
    seeds=
    i=0
    while [ $i -lt "${CHAOS_RUNS:-3}" ]; do
        seeds="$seeds $(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"
        i=$((i + 1))
    done
fi

# The schedule replays: a seed's faults do not depend on whether its mode was forced.
(cd "$here" && $py schedule.py) || { echo "FAIL - the fault schedule does not replay"; exit 1; }
# The nemesis signals only the workload's own processes, found by both ends of a connection.
(cd "$here" && $py targets.py) ||
    { echo "FAIL - the nemesis could signal a process not its own"; exit 1; }
pg_start
# Every line with its time (ms, UTC) and backend pid: the checker's clock and the key that ties a
# probe's start to its end, error or disconnection.
psql -qAtX -c "ALTER SYSTEM SET log_line_prefix = '%m [%p] '" -c "ALTER SYSTEM SET log_timezone = 'UTC'" \
    -c "ALTER SYSTEM SET log_disconnections = on" -c "SELECT pg_reload_conf()" >/dev/null
psql -qAtX -f "$here/probe.sql" >/dev/null || { echo "FAIL - could not install chaos_probe"; exit 1; }
# pg_reload_conf() only signals the postmaster: wait until a new session sees the new prefix.
wait_until 10 '[ "$(psql -qAtX -c "SHOW log_line_prefix")" = "%m [%p] " ]' ||
    { echo "FAIL - the server did not take the chaos log settings"; exit 1; }

# stop_redis: the run's Redis, or its Sentinel topology.
stop_redis() {
    if [ -d "$run/sentinel" ]; then
        sh "$here/sentinel.sh" stop "$run/sentinel"
    elif [ -f "$run/redis.pid" ]; then
        redis_pid=$(cat "$run/redis.pid")
        redis_kill
    fi
}

export CHAOS_LIB="$lib" CHAOS_CLI="$top/build/dbthrottle" CHAOS_PGDIR="$work/pg" CHAOS_TOP="$top"
for seed in $seeds; do
    run="$work/run.$seed"
    mkdir -p "$run"
    rport=$(free_port)
    offset=$(wc -c <"$work/pg/server.log")
    echo "# chaos seed $seed: ${seconds}s"
    if ! (cd "$here" && $py orchestrate.py "$seed" "$seconds" "$run" "$rport"); then
        fail "chaos seed $seed: the run did not complete (replay: make chaos SEED=$seed)"
        stop_redis
        continue
    fi
    # The primary now (behind Sentinel, the one it promoted).
    rport=$(cat "$run/redis.port")
    # The workers' last releases are sent as they exit, not waited for: 1 s for Redis to apply them.
    nothing_left q dbthrottle: 1 >"$run/left" 2>&1
    holders=$(live_holders)
    waiters=$(live_waiters)
    stop_redis
    # The run's part of the server log, kept with its history (a failed run is copied whole).
    tail -c +$((offset + 1)) "$work/pg/server.log" >"$run/server.log"
    if (cd "$here" && $py check.py "$run/history.json" "$run/server.log" "$holders" "$waiters"); then
        ok "chaos seed $seed"
    else
        sed 's/^/  /' "$run/left"
        fail "chaos seed $seed (replay: make chaos SEED=$seed${CHAOS_MODE:+ CHAOS_MODE=$CHAOS_MODE} CHAOS_SECONDS=$seconds)"
        [ -n "${DBT_KEEP:-}" ] || { rm -rf "/tmp/chaos-failed-$seed"; cp -r "$run" "/tmp/chaos-failed-$seed"; }
    fi
done
summary
