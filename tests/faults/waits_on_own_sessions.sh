# waits_on_own_sessions.sh - a program that waits for its own sessions deadlocks at a limit too
# small for them, until the wait timeout: a real pg_dump -j 2 at DBTHROTTLE_MAX_QUERIES=1 (its
# leader holds the one permit in its snapshot transaction, idle while its forked workers wait for
# a permit), and a shell pipeline of two throttled psql in one pool (the writer's transaction
# holds the permit while the reader waits). The refusal the waiting side gets must say so: that
# its parent (or a process of its pipeline) holds a permit idle in a transaction, and the fixes.
echo "# waits_on_own_sessions: pg_dump -j 2 and a pipeline of two psql at a limit of 1 get an explanatory refusal"
psql -qAtX -c "CREATE TABLE IF NOT EXISTS dump_a AS SELECT generate_series(1, 1000) AS i;
    CREATE TABLE IF NOT EXISTS dump_b AS SELECT generate_series(1, 1000) AS i" >/dev/null
own="DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=3s DBTHROTTLE_WAIT_TIMEOUT=4s DBTHROTTLE_POOL=own_sessions"
t0=$(now_ms)
# shellcheck disable=SC2086
env LD_PRELOAD="$preload" $own pg_dump -j 2 -Fd -f "$work/dump" -t dump_a -t dump_b >/dev/null 2>"$work/pg_dump.err"
rc=$?
took=$(($(now_ms) - t0))
info "pg_dump -j 2 at a limit of 1: rc $rc after $took ms: $(grep -m1 dbthrottle "$work/pg_dump.err")"
check "waits_on_own_sessions: pg_dump -j 2 at a limit of 1 fails after the wait timeout, not before and not forever ($took ms)" \
    '[ "$rc" -ne 0 ] && [ "$took" -ge 3500 ] && [ "$took" -lt 30000 ]'
check "waits_on_own_sessions: its worker's refusal says the wait timed out" 'grep -q "DBTHROTTLE_WAIT_TIMEOUT reached" "$work/pg_dump.err"'
check "waits_on_own_sessions: ... and that its parent, pg_dump, holds a permit idle in a transaction: a deadlock, with the fixes" \
    'grep "DBTHROTTLE_WAIT_TIMEOUT reached" "$work/pg_dump.err" | grep "its parent process [0-9]* (pg_dump) holds 1 permit of this pool idle in a transaction" | grep -q "pg_dump/pg_restore -j N needs at least N + 1"'
check "waits_on_own_sessions: nothing is held or queued once pg_dump has gone" \
    'wait_until 10 "[ \"\$(live_holders q)\" -eq 0 ] && [ \"\$(live_waiters q)\" -eq 0 ]"'

# The pipeline: the writer opens a transaction and writes into the pipe; the reader starts its own
# query once it has read that, and the writer commits only once the reader's query has ended (as a
# writer blocked on a full pipe would, until its reader reads on: here it never would). Not after a
# fixed 6 s: the reader's start and its 4 s wait came close to that under load. 30 s at most.
cat >"$work/pipe.sh" <<EOF
psql -qAtX -c 'BEGIN' -c 'SELECT 1' \\
    -c '\\! echo ready; i=0; while [ ! -e "$work/pipe.done" ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done' \\
    -c 'COMMIT' |
    { read -r line; psql -qAtX -c 'SELECT 2' >/dev/null 2>"$work/pipe.err"; touch "$work/pipe.done"; cat >/dev/null; }
EOF
t0=$(now_ms)
# shellcheck disable=SC2086
env LD_PRELOAD="$preload" $own sh "$work/pipe.sh" >/dev/null 2>"$work/pipe.sh.err"
took=$(($(now_ms) - t0))
info "a pipeline of two psql at a limit of 1: $(head -c 300 "$work/pipe.err") ($took ms)"
check "waits_on_own_sessions: the reader of the pipeline is refused at the wait timeout, told that a process of its process group holds a permit idle in a transaction" \
    'grep "DBTHROTTLE_WAIT_TIMEOUT reached" "$work/pipe.err" | grep -q "process [0-9]* (psql) of its process group holds 1 permit of this pool idle in a transaction"'
