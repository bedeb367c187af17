# forks_while_waiting.sh - a child of fork() frees what it inherited of other threads' waits for a
# permit (their slots' eventfds, the Redis connections they were using, the listener): a pre-fork
# parent whose threads wait forks children again and again, and each child has as many descriptors
# as one forked while nothing waited (counted in /proc/<child>/fd, from the parent).
echo "# forks_while_waiting: descriptors of children forked while the parent's threads wait"
cat >"$work/fw.py" <<'PY'
import os, sys, threading, time, psycopg2
step = sys.argv[1]
def wait_file(name):
    end = time.monotonic() + 60
    while not os.path.exists(step + name) and time.monotonic() < end:
        time.sleep(0.02)
conns = [psycopg2.connect('') for _ in range(5)]
for c in conns:
    c.autocommit = True
    c.cursor().execute('SELECT 1')
def child_fds():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, b'x')
        time.sleep(60)
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    fds = {}
    for f in os.listdir('/proc/%d/fd' % pid):
        try:
            fds[int(f)] = os.readlink('/proc/%d/fd/%s' % (pid, f))
        except OSError:
            pass
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    os.close(r)
    return fds
def show(fds):
    return ' '.join('%d:%s' % kv for kv in sorted(fds.items()))
idle = child_fds()
before = len(idle)
open(step + '.idle', 'w').close()
wait_file('.held')
threads = [threading.Thread(target=lambda c=c: c.cursor().execute('SELECT 1')) for c in conns[1:]]
for t in threads:
    t.start()
wait_file('.waiting')
children = [child_fds() for _ in range(5)]
after = [len(c) for c in children]
print('before=%d after=%s' % (before, ','.join(map(str, after))), flush=True)
# What a child that differs had, beside the idle one's: to go on when the check fails.
for c in children:
    if len(c) != before:
        print('idle child: %s; this one: %s' % (show(idle), show(c)), flush=True)
open(step + '.forked', 'w').close()
for t in threads:
    t.join()
PY
fw_env="DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=60s"
env LD_PRELOAD="$preload" $fw_env PGAPPNAME=fw /usr/bin/python3 "$work/fw.py" "$work/fw" >"$work/fw.out" 2>>"$work/workers.err" &
fw_pid=$!
wait_until 20 '[ -e "$work/fw.idle" ]'
# The holder shares with no host group: the threads then queue in Redis, where the case sees them
# (behind a holder of their own group they may wait in the host's segment, and Redis counts none).
throttled $fw_env DBTHROTTLE_HOST_SHARE=off PGAPPNAME=fw_holder psql -X -c "SELECT pg_sleep(30)" >/dev/null 2>&1 &
fw_holder=$!
echo "$fw_holder" >>"$work/pids"
# Running at the server, not only counted as a holder in Redis: the parent may keep its last
# permit idle (DBTHROTTLE_CACHE_PERMITS), which counts as the one holder until the holder's acquire
# recalls it; threads started before that ran on it and never waited.
fw_running() { psql -qAtX -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fw_holder' AND state = 'active'"; }
wait_until 10 '[ "$(fw_running)" -eq 1 ] && [ "$(live_holders)" -eq 1 ]'
touch "$work/fw.held"
check "forks_while_waiting: the parent's 4 threads queue in Redis behind the holder" 'wait_until 20 "[ \$(live_waiters) -eq 4 ]"'
fw_waiting=$(live_waiters)
touch "$work/fw.waiting"
wait_until 30 '[ -e "$work/fw.forked" ]'
res=$(cat "$work/fw.out" | tr '\n' ' ')
kill "$fw_holder" 2>/dev/null
psql -X -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'fw_holder'" >/dev/null
wait "$fw_holder" 2>/dev/null
wait "$fw_pid"
check "forks_while_waiting: 5 children forked while $fw_waiting threads waited have the descriptors of one forked while none did ($res)" \
    'echo "$res" | awk "{ split(\$1, b, \"=\"); split(\$2, a, \"=\"); n = split(a[2], c, \",\"); if (n != 5) exit 1; for (i = 1; i <= n; i++) if (c[i] != b[2]) exit 1 }"'
wait_until 10 '[ "$(live_holders)" -eq 0 ] && [ "$(live_waiters)" -eq 0 ]'
check "forks_while_waiting: nothing held or queued in the end" 'nothing_left'
