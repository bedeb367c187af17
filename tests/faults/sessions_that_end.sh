# sessions_that_end.sh - a session the server ends gives its permits back at once, while the
# program still keeps its PGconn open: pg_terminate_backend of a session idle in a transaction
# (query permit) or merely connected (connection permit), and idle_in_transaction_session_timeout.
# A transaction that began while Redis was unreachable (open mode) runs to its end without a
# permit rather than queue mid-way while it holds its locks.
echo "# sessions_that_end: pg_terminate_backend, idle_in_transaction_session_timeout, a transaction begun unthrottled"
# The client: keeps one connection open (psycopg2: a transaction begins with its first statement,
# or autocommit with no statement at all), prints its backend's pid, then waits for $1.go and
# runs one more statement on the connection (its error, or "ok").
cat >"$work/se.py" <<'PY'
import os, sys, time, psycopg2
go, mode = sys.argv[1], sys.argv[2]
conn = psycopg2.connect('')
cur = conn.cursor()
if mode == 'connected':
    conn.autocommit = True
    pid = conn.get_backend_pid()
else:
    if mode.startswith('timeout='):
        cur.execute("SET idle_in_transaction_session_timeout = '%s'" % mode[8:])
    cur.execute('SELECT pg_backend_pid()')
    pid = cur.fetchone()[0]
print(pid, flush=True)
end = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < end:
    time.sleep(0.02)
try:
    cur.execute('SELECT 1')
    print('ok', flush=True)
except psycopg2.Error as e:
    print('error %s' % (e.pgcode or type(e).__name__), flush=True)
PY
se_env="DBTHROTTLE_LEASE=2s DBTHROTTLE_WAIT_TIMEOUT=3s"
# se_case NAME KIND ENV MODE HOW: the client with ENV, holding a permit of KIND; HOW ends its session.
se_case() {
    se_name=$1 se_kind=$2 se_env3=$3 se_mode=$4 se_how=$5
    rm -f "$work/se.$se_name.go"
    env LD_PRELOAD="$preload" $se_env $se_env3 DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_LOG="$work/se.$se_name.log" PGAPPNAME=se_$se_name /usr/bin/python3 "$work/se.py" "$work/se.$se_name.go" "$se_mode" \
        >"$work/se.$se_name.out" 2>>"$work/workers.err" &
    se_pid=$!
    # What it held is read once, as it is seen: idle_timeout's session may end by itself 0.5 s
    # after its statement, and a second look, later, found it gone already beside a busy loop
    # (holders 0 before the timeout's end was even waited for).
    held=0
    wait_until 10 '[ -s "$work/se.$se_name.out" ] && held=$(live_holders "$se_kind") && [ "$held" -eq 1 ]'
    backend=$(head -1 "$work/se.$se_name.out")
    t0=$(now_ms)
    eval "$se_how"
    # Within 1 s of the session's end (HOW returns when the server has ended it).
    wait_until 1 '[ "$(live_holders "$se_kind")" -eq 0 ]'
    gone_ms=$(( $(now_ms) - t0 ))
    check "sessions_that_end: $se_name: the $se_kind permit (holders $held) went back ${gone_ms} ms after the session ended, the client still running with its PGconn open (holders now $(live_holders "$se_kind"))" \
        '[ "$held" -eq 1 ] && [ "$(live_holders "$se_kind")" -eq 0 ] && kill -0 "$se_pid" 2>/dev/null'
    throttled $se_env $se_env3 PGAPPNAME=se_new psql -X -At -c "SELECT 'granted'" >"$work/se.$se_name.new" 2>&1
    check "sessions_that_end: $se_name: a newcomer was granted meanwhile ($(tr '\n' ' ' <"$work/se.$se_name.new"))" 'grep -qx granted "$work/se.$se_name.new"'
    g0=$(grants_made)
    touch "$work/se.$se_name.go"
    wait "$se_pid"
    check "sessions_that_end: $se_name: a command on the dead connection failed ($(tail -1 "$work/se.$se_name.out")), took no permit (grants $g0 -> $(grants_made)), holds none" \
        '[ "$(tail -1 "$work/se.$se_name.out")" != ok ] && [ "$(grants_made)" -eq "$g0" ] && [ "$(live_holders "$se_kind")" -eq 0 ]'
}
terminate() { psql -X -At -c "SELECT pg_terminate_backend($backend)" >/dev/null; }
se_case idle_in_tx q "DBTHROTTLE_MAX_QUERIES=1" tx terminate
# A pool named by hand: the default pool's name is read from libpq before the connection exists,
# which crashes libpq 15's PQhost for psycopg2 (seen here; the pool naming is not this case's).
se_case connected c "DBTHROTTLE_MAX_CONNECTIONS=1 DBTHROTTLE_POOL=se_connected" connected terminate
# The server ends the session by itself 0.5 s into the idle transaction: measured from when
# pg_stat_activity no longer lists it.
se_case idle_timeout q "DBTHROTTLE_MAX_QUERIES=1" timeout=500ms \
    'wait_until 10 "[ \"\$(psql -X -At -c \"SELECT count(*) FROM pg_stat_activity WHERE pid = $backend\")\" -eq 0 ]"'

# A transaction begun while Redis was unreachable: BEGIN and its first statement ran unthrottled
# (open mode). Redis answers again and another session holds the only permit: the transaction's
# next statement and its COMMIT run at once, without queueing behind it.
cat >"$work/se_tx.py" <<'PY'
import os, sys, time, psycopg2
began, go = sys.argv[1], sys.argv[2]
conn = psycopg2.connect('')
cur = conn.cursor()
cur.execute('SELECT 1')          # BEGIN; SELECT 1, with Redis stopped
open(began, 'w').close()
end = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < end:
    time.sleep(0.02)
time.sleep(1.2)                  # past the outage's one-second backoff: Redis is asked again
t0 = time.monotonic()
cur.execute('SELECT 2')
conn.commit()
print('took_ms=%d' % ((time.monotonic() - t0) * 1000), flush=True)
PY
rm -f "$work/se_tx.began" "$work/se_tx.go"
tx_env="DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_WAIT_TIMEOUT=20s DBTHROTTLE_LOG_LEVEL=info"
kill -STOP "$redis_pid"
env LD_PRELOAD="$preload" $tx_env DBTHROTTLE_LOG="$work/se_tx.log" PGAPPNAME=se_tx /usr/bin/python3 "$work/se_tx.py" \
    "$work/se_tx.began" "$work/se_tx.go" >"$work/se_tx.out" 2>>"$work/workers.err" &
tx_pid=$!
wait_until 10 '[ -e "$work/se_tx.began" ]'
kill -CONT "$redis_pid"
throttled $tx_env PGAPPNAME=se_holder psql -X -c "SELECT pg_sleep(8)" >/dev/null 2>&1 &
holder=$!
wait_until 10 '[ "$(live_holders)" -eq 1 ]'
touch "$work/se_tx.go"
wait "$tx_pid"
held_after=$(live_holders)
took=$(sed -n 's/^took_ms=//p' "$work/se_tx.out")
check "sessions_that_end: a transaction begun unthrottled ended without queueing behind the holder (${took:-?} ms; holders still $held_after)" \
    '[ -n "$took" ] && [ "$took" -lt 2000 ] && [ "$held_after" -eq 1 ]'
check "sessions_that_end: its statements were counted as unthrottled ($(grep -o 'unthrottled=[0-9]*' "$work/se_tx.log" | tail -1))" \
    'grep -q "unthrottled.*runs to its end" "$work/se_tx.log" && [ "$(grep -o "unthrottled=[0-9]*" "$work/se_tx.log" | tail -1 | cut -d= -f2)" -ge 3 ]'
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
wait_until 10 '[ "$(live_holders)" -eq 0 ] && [ "$(live_waiters)" -eq 0 ]'
check "sessions_that_end: nothing held or queued in the end" 'nothing_left'
