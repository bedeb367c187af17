# clients_that_disagree.sh - clients that disagree. As docs/design.md says: in one pool each caller is admitted only
# below its own limit, so the most holders is the largest limit configured; leases may differ
# per client; a different key prefix is a different semaphore altogether.
echo "# clients_that_disagree: different limits, leases and key prefixes for one pool"
mark
# 60 probes a worker: reaching 3 at once needs a limit-4 waiter at the queue's head while 2 are
# held (the head is strict), and with 30 (kept permits, make test's lanes) one run in eight never
# did: most seen 2, which the check cannot tell from a bound of 2.
wargs="-n 60 -s 10"
# With classes (make test-faults-classes), the workers here share one class: handed classes in
# turn, every limit-2 worker would be of one class and every limit-4 worker of the other, and a
# limit-2 head of the preferred class blocks the others (the head is strict), so the pool often
# never went above 2 and the check below could not tell the bound from a starved pool (most seen
# 2 on a fresh machine). One class ranks them by ticket alone, as without classes.
c7_class=
[ -z "${DBT_FAULTS_CLASSES:-}" ] || c7_class="DBTHROTTLE_CLASS=${DBT_FAULTS_CLASSES%% *}"
i=0
while [ $i -lt 3 ]; do
    spawn "$work/c7.lim2.$i" PGAPPNAME=c7 DBTHROTTLE_POOL=c7 DBTHROTTLE_MAX_QUERIES=2 $c7_class
    spawn "$work/c7.lim4.$i" PGAPPNAME=c7 DBTHROTTLE_POOL=c7 DBTHROTTLE_MAX_QUERIES=4 $c7_class
    i=$((i + 1))
done
wait_workers
wargs="-n 30 -s 10" # the rest as before
c=$(max_conc c7)
okl=$(sum_field ok "$work"/c7.lim*)
check "clients_that_disagree: limits 2 and 4 in one pool: never more than 4 at once (most seen: $c), all $okl of 360 ran" '[ "$c" -le 4 ] && [ "$c" -ge 3 ] && [ "$okl" -eq 360 ]'
check "clients_that_disagree: the disagreement was logged" 'grep -q "limit_disagreement" "$work/workers.err"'

# Leases of 2 s and 9 s: a 1 s lease was shorter than what a TSan worker beside make test's other
# lanes could go without renewing (5 at once, once), which the limit cannot survive in open mode
# by design; the check says what the workers counted, so that another failure explains itself.
mark
i=0
while [ $i -lt 4 ]; do
    spawn "$work/c7.lease1.$i" PGAPPNAME=c7l DBTHROTTLE_POOL=c7l DBTHROTTLE_MAX_QUERIES=3 DBTHROTTLE_LEASE=2s
    spawn "$work/c7.lease9.$i" PGAPPNAME=c7l DBTHROTTLE_POOL=c7l DBTHROTTLE_MAX_QUERIES=3 DBTHROTTLE_LEASE=9s
    i=$((i + 1))
done
wait_workers
c=$(max_conc c7l)
okl=$(sum_field ok "$work"/c7.lease*)
c7_counted=$(grep -h 'event=summary pool=c7l ' "$work/workers.err" 2>/dev/null | grep -oE '(unthrottled|redis_errors|leases_lost)=[1-9][0-9]*' | sort | uniq -c | tr -s ' \n' ' ')
# A worker that ran commands unthrottled (open mode: its calls to Redis failed, a TSan worker
# starved beside the other lanes, 2 errors and 29 commands once) is over the limit by design:
# the bound is then not judged, only printed; every other run judges it.
if echo "$c7_counted" | grep -q unthrottled; then
    info "clients_that_disagree: leases of 2 s and 9 s: at most 3 at once not judged: a worker ran unthrottled in open mode (most seen: $c; the workers' summaries: $c7_counted)"
    check "clients_that_disagree: leases of 2 s and 9 s in one pool: all $okl of 240 ran" '[ "$okl" -eq 240 ]'
else
    check "clients_that_disagree: leases of 2 s and 9 s in one pool: at most 3 at once (most seen: $c; the workers' summaries' nonzero unthrottled, redis_errors, leases_lost:${c7_counted:- none}), all $okl of 240 ran" '[ "$c" -le 3 ] && [ "$c" -ge 2 ] && [ "$okl" -eq 240 ]'
fi

mark
i=0
while [ $i -lt 3 ]; do
    spawn "$work/c7.pa.$i" PGAPPNAME=c7a DBTHROTTLE_POOL=c7p DBTHROTTLE_KEY_PREFIX=a: DBTHROTTLE_MAX_QUERIES=2
    spawn "$work/c7.pb.$i" PGAPPNAME=c7b DBTHROTTLE_POOL=c7p DBTHROTTLE_KEY_PREFIX=b: DBTHROTTLE_MAX_QUERIES=2
    i=$((i + 1))
done
wait_workers
ca=$(max_conc c7a)
cb=$(max_conc c7b)
check "clients_that_disagree: prefixes a: and b: are two semaphores: at most 2 each at once (most seen: $ca and $cb)" '[ "$ca" -le 2 ] && [ "$cb" -le 2 ] && [ "$ca" -ge 1 ] && [ "$cb" -ge 1 ]'
# Any of the pool's keys (which ones exist depends on the run: with kept permits and under ASan
# nobody may have queued in Redis, and the queue's counter was never made).
c7keys() { rcli --scan --pattern "$1{c7p}:*" | wc -l; }
check "clients_that_disagree: each prefix has its own keys (a: $(c7keys a:), b: $(c7keys b:))" '[ "$(c7keys a:)" -ge 1 ] && [ "$(c7keys b:)" -ge 1 ]'
check "clients_that_disagree: nothing held or queued in the end" 'nothing_left q ""'
wargs=
