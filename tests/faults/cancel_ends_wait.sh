# cancel_ends_wait.sh - signals and cancel. While a command waits for a permit the server has nothing to cancel,
# so PQcancel must end the wait itself: psql's Ctrl-C (SIGINT, whose handler calls PQcancel),
# psycopg2's cancel() from another thread. A statement the server cancels (statement_timeout) gives
# its permit back. Afterwards nothing is held or queued and no descriptor is left behind.
echo "# cancel_ends_wait: SIGINT, PQcancel from another thread, statement_timeout"
c5="DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=2s"
# The holder holds until the cancels below are done (its backend is cancelled then): a fixed hold
# ran out under load before the 30 cancels had, and a wait was granted instead of cancelled.
wargs="-n 1 -s 120000" spawn "$work/c5.holder" PGAPPNAME=c5 $c5
holder=$spawned
wait_until 10 '[ "$(live_holders)" -eq 1 ]'
# Not through a shell function: $! must be psql itself.
t0=$(now_ms)
env LD_PRELOAD="$preload" $c5 psql -X -c "SELECT dbt_probe(0)" >"$work/c5.psql" 2>&1 &
psql_pid=$!
wait_until 10 '[ "$(live_waiters)" -eq 1 ]'
kill -INT "$psql_pid"
wait "$psql_pid"
rc=$?
took=$(( $(now_ms) - t0 ))
check "cancel_ends_wait: Ctrl-C ended psql's wait in $took ms with its error (rc $rc: $(head -c 160 "$work/c5.psql" | tr '\n' ' '))" '[ "$rc" -ne 0 ] && [ "$took" -lt 3000 ] && grep -q "canceling statement due to user request" "$work/c5.psql"'
check "cancel_ends_wait: its place in the queue was withdrawn" 'wait_until 2 "[ \"\$(live_waiters)\" -eq 0 ]"'
# The descriptors are counted after 10 cancels and again after 20 more, and must be the same:
# a descriptor made or kept per cancel shows as 20 more. Not from the first cancel on: what the
# process makes once, when its first waits need it (a connection to Redis), is not a leak. new=
# lists the descriptors open after 30 that were not (or were something else) after 10, to go on
# when it fails (a connection made again counts as new without being a leak: only counts compare).
cat >"$work/c5.py" <<'PY'
import os, sys, threading, time, psycopg2, psycopg2.errors
def fds():
    out = {}
    for f in os.listdir('/proc/self/fd'):
        try:
            out[f] = os.readlink('/proc/self/fd/' + f)
        except OSError:
            pass # the directory's own descriptor, closed by now
    return out
conn = psycopg2.connect('')
conn.autocommit = True
cur = conn.cursor()
codes, took, seen = [], [], {}
for i in range(30):
    t = threading.Timer(0.2, conn.cancel)
    t.start()
    t0 = time.monotonic()
    try:
        cur.execute('SELECT dbt_probe(0)')
        codes.append('none')
    except psycopg2.Error as e:
        codes.append(e.pgcode)
    took.append(time.monotonic() - t0)
    t.join()
    if i + 1 in (10, 30):
        seen[i + 1] = fds()
new = sorted('%s:%s' % (k, v) for k, v in seen[30].items() if seen[10].get(k) != v)
print('codes=%s max_s=%.2f fds_after10=%d fds_after30=%d new=%s' % (','.join(sorted(set(codes))),
      max(took), len(seen[10]), len(seen[30]), ','.join(new) or '-'))
PY
throttled $c5 PGAPPNAME=c5py /usr/bin/python3 "$work/c5.py" >"$work/c5.pyout" 2>&1
res=$(cat "$work/c5.pyout")
check "cancel_ends_wait: 30 x cancel() from another thread: each wait ended with 57014 in well under a second, the holder still holding ($res)" 'echo "$res" | grep -q "codes=57014 max_s=0\.[0-9]"'
check "cancel_ends_wait: no descriptor leaked across those cancels (as many after 10 as after 30)" 'echo "$res" | awk "{ split(\$3, a, \"=\"); split(\$4, b, \"=\"); exit !(a[2] == b[2]) }"'
psql -qAtX -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'c5'" >/dev/null
wait "$holder"
throttled $c5 psql -X -c "SET statement_timeout = 100" -c "SELECT dbt_probe(2000)" >"$work/c5.st" 2>&1
st_rc=$?
check "cancel_ends_wait: statement_timeout cancelled the statement at the server (rc $st_rc)" '[ "$st_rc" -ne 0 ] && grep -q "statement timeout" "$work/c5.st"'
check "cancel_ends_wait: and its permit went back at once (holders $(live_holders))" '[ "$(live_holders)" -eq 0 ]'
check "cancel_ends_wait: nothing held or queued in the end" 'nothing_left'
wargs=
