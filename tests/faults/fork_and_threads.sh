# fork_and_threads.sh - fork and threads. A pre-fork server (the parent connects and runs a probe, then forks 8
# children that each open their own connection, as gunicorn and php-fpm do); fork() while other
# threads wait for permits; 64 threads with a connection each. Counts must add up, nothing may
# deadlock (each run has a time limit), no Redis socket may be shared by two processes (ss lists
# every process that holds a socket), and a process keeps a few Redis connections, not one per
# thread.
echo "# fork_and_threads: pre-fork server, fork while waiting, 64 threads"
# sample_sockets PID: sockets to Redis held by more than one process, sampled every 20 ms until
# PID (the parent) ends, into c6.shared. Right after a fork() every socket is the child's too,
# until the library's fork handler in the child closes it, and a child that waits for a CPU keeps
# them that long (CI runs under load sampled that twice: once for one sample, once for two). So a
# shared socket counts only when one of its other processes holds a Redis socket of its own in
# the same sample: that child has made a connection, so its fork handler ran long before. And,
# as before, only when two samples in a row see it.
sample_sockets() {
    : >"$work/c6.shared"
    : >"$work/c6.was"
    while kill -0 "$1" 2>/dev/null; do
        ss -Htnp state established "( dport = :$rport )" 2>/dev/null |
            awk -v parent="$1" '
                { n = split($0, a, /pid=/); pids = ""; k = 0; delete seen
                  for (i = 2; i <= n; i++) {
                      p = a[i]; sub(/[^0-9].*/, "", p)
                      if (!(p in seen)) { seen[p] = 1; pids = pids " " p; k++ } }
                  sock[$3] = pids; holders[$3] = k
                  if (k == 1) own[substr(pids, 2)] = 1 }
                END { for (s in sock) if (holders[s] > 1) {
                          m = split(sock[s], ps, " ")
                          for (i = 1; i <= m; i++)
                              if (ps[i] != parent && (ps[i] in own)) { print "- -", s, sock[s]; break } } }' >"$work/c6.now"
        # Local address and port name the socket; the same one shared in the last sample too.
        awk 'NR == FNR { was[$3] = 1; next } ($3 in was)' "$work/c6.was" "$work/c6.now" >>"$work/c6.shared"
        mv "$work/c6.now" "$work/c6.was"
        sleep 0.02
    done
}
mark
c6="PGAPPNAME=c6 DBTHROTTLE_MAX_QUERIES=3"
wargs="-F 8 -n 20 -s 5" spawn "$work/c6.prefork" $c6
pf=$spawned
sample_sockets "$pf"
wait "$pf"
rc=$?
ok6=$(sum_field ok "$work/c6.prefork")
err6=$(sum_field err "$work/c6.prefork")
check "fork_and_threads: pre-fork: parent + 8 children ran 162 probes ($ok6 ok, $err6 failed, rc $rc)" '[ "$rc" -eq 0 ] && [ "$ok6" -eq 162 ] && [ "$err6" -eq 0 ]'
check "fork_and_threads: pre-fork: no Redis socket shared by two processes ($(wc -l <"$work/c6.shared") seen)" '[ ! -s "$work/c6.shared" ]'
check "fork_and_threads: pre-fork: at most 3 at once at the server (most seen: $(max_conc c6))" '[ "$(max_conc c6)" -le 3 ] && [ "$(max_conc c6)" -ge 2 ]'
# Evidence for a failure: what the workers said (Redis errors run them unthrottled in open mode).
[ "$(max_conc c6)" -le 3 ] || grep -v "slow call" "$work/workers.err" | tail -20

# The child ends with _exit() (as a forked child does, Python's multiprocessing too): no exit
# handler runs, so a permit it kept after its last probe (the parent's threads done by then: no
# waiter, nothing contended) returns with its lease, as a killed process' does. Lease 2 s: the
# end's check below waits that long.
mark
wargs="-T 4 -K -n 5 -s 50" spawn "$work/c6.forkwait" PGAPPNAME=c6k DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LEASE=2s
fw=$spawned
sample_sockets "$fw" &
sampler=$!
if wait_until 30 '! kill -0 "$fw" 2>/dev/null'; then wait "$fw"; rc=$?; else rc=124; fi
wait "$sampler"
okk=$(sum_field ok "$work/c6.forkwait")
check "fork_and_threads: fork() while 2 of 4 threads wait: no deadlock, 4x5 + the child's 5 probes ($okk, rc $rc)" '[ "$rc" -eq 0 ] && [ "$okk" -eq 25 ]'
check "fork_and_threads: fork while waiting: no Redis socket shared, at most 2 at once (most seen: $(max_conc c6k))" '[ ! -s "$work/c6.shared" ] && [ "$(max_conc c6k)" -le 2 ]'

mark
wargs="-T 64 -n 10 -s 2" spawn "$work/c6.threads" PGAPPNAME=c6t DBTHROTTLE_MAX_QUERIES=4 \
    DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_LOG="$work/c6t.log"
th=$spawned
conns=0
while kill -0 "$th" 2>/dev/null; do
    n=$(ss -Htnp state established "( dport = :$rport )" 2>/dev/null | grep -c "pid=$th,")
    [ "$n" -gt "$conns" ] && conns=$n
    sleep 0.02
done
wait "$th"
rc=$?
okt=$(sum_field ok "$work/c6.threads")
check "fork_and_threads: 64 threads x 10 probes: $okt ok, rc $rc" '[ "$rc" -eq 0 ] && [ "$okt" -eq 640 ]'
check "fork_and_threads: 64 threads: at most 4 at once at the server (most seen: $(max_conc c6t))" '[ "$(max_conc c6t)" -le 4 ] && [ "$(max_conc c6t)" -ge 3 ]'
# Evidence for a failure: the workers' warnings (a Redis error runs a command unthrottled in open
# mode) and the server's lines where too many ran.
if [ "$(max_conc c6t)" -gt 4 ]; then
    grep -v "slow call" "$work/workers.err" | tail -20
    grep -v "event=grant\|event=release\|event=wait" "$work/c6t.log" | tail -20
    tail -n +"$((log_mark + 1))" "$work/pg/server.log" | grep -E "dbt_conc app=c6t n=([5-9]|[1-9][0-9])" | head -5
fi
check "fork_and_threads: 64 threads used $conns Redis connections (at most 8 for commands + 1 listener)" '[ "$conns" -ge 1 ] && [ "$conns" -le 9 ]'
check "fork_and_threads: nothing held or queued in the end" 'nothing_left q dbthrottle: 3'
# Evidence for a failure (once in make test beside a busy loop: a holder of the fork-while-waiting
# part left with most of its lease): what the workers said of Redis, of leases and at exit.
nl_none || grep -v "slow call" "$work/workers.err" | tail -30
wargs=
