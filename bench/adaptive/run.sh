#!/bin/sh
# run.sh - `make bench-adaptive`: the adaptive limit's measured acceptance (issue 20) in one run,
# against a throwaway redis-server and PostgreSQL on free loopback ports (tests/support/lib.sh),
# stopped at the end. This file starts the servers and creates the workloads' tables and
# functions; bench/adaptive/driver.py runs the parts and prints the summary; the PNG plots go to
# build/bench/. BENCH_QUICK=1: a shorter run (about 3 minutes) for development. DBT_KEEP=1 keeps
# the work directory (pgbench logs, the controllers' logs, the samples).
set -eu
. "$(dirname "$0")/../../tests/support/lib.sh"
cli=${DBT_CLI:-$top/build/dbthrottle}
harness_begin adaptive-bench
# lib.sh's cleanup calls it when defined; defined, the cleanup's test for it cannot stop the
# cleanup under set -e before the servers are stopped.
suite_cleanup() { :; }
redis_start
pg_start
psql -qAtX <<'SQL' >/dev/null
-- The CPU-bound statement: a sum over generate_series, a few ms of one core and nothing waited on.
CREATE FUNCTION bench_cpu(n int) RETURNS bigint LANGUAGE sql AS
    'SELECT sum(i) FROM generate_series(1, n) i';
-- The hot rows: few rows, many updaters, each holding its row lock for a few ms (lock waits).
CREATE TABLE hot (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO hot SELECT g, 0 FROM generate_series(1, 16) g;
-- The step's statement: a wait off the CPU (pg_sleep) and then CPU work whose size is read from
-- bench_knob at each call, so that one UPDATE changes the cost under running clients.
CREATE TABLE bench_knob (sleep_ms float8 NOT NULL, cpu_n int NOT NULL);
INSERT INTO bench_knob VALUES (10, 5000);
CREATE FUNCTION bench_mixed() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE s float8; n int; r bigint;
BEGIN
    SELECT sleep_ms, cpu_n INTO s, n FROM bench_knob;
    PERFORM pg_sleep(s / 1000.0);
    SELECT sum(i) INTO r FROM generate_series(1, n) i;
    RETURN r;
END $$;
SQL
mkdir -p "$top/build/bench"
python3 "$top/bench/adaptive/driver.py" --work "$work" --redis-port "$rport" --lib "$lib" \
    --cli "$cli" --out "$top/build/bench"
