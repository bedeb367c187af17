# threads_share_a_pool.sh - threads, for the checkers (ASan, TSan, valgrind run the suite's workers with their own
# builds; make check-*). 12 threads share MAX_QUERIES=3: grants, handovers, waits that time out
# (a 5 ms DBTHROTTLE_WAIT_TIMEOUT), transactions that keep a permit across statements. Redis
# answers throughout, so the limit must hold: a Redis timeout of 10 s, as a sanitizer's slowness
# beside CI's other lanes must not make open mode (the default) run a command unthrottled (one
# TSan run saw 7 at once at a limit of 3 with the 1 s default; the check says what the workers
# counted).
echo "# threads_share_a_pool: threads: handovers, timeouts and transactions${DBT_WRAP:+ (under ${DBT_WRAP%% *})}${DBT_LIB:+ ($(basename "$DBT_LIB"))}"
mark
c10_env=DBTHROTTLE_REDIS_TIMEOUT=10s
n=20
[ -n "${DBT_WRAP:-}" ] && n=5 # valgrind is some 30 times slower
wargs="-T 6 -n $n -s 2" spawn "$work/c10.plain" PGAPPNAME=c10 DBTHROTTLE_POOL=c10 DBTHROTTLE_MAX_QUERIES=3 $c10_env
wargs="-T 3 -n $n -s 2" spawn "$work/c10.timeout" PGAPPNAME=c10 DBTHROTTLE_POOL=c10 DBTHROTTLE_MAX_QUERIES=3 $c10_env DBTHROTTLE_WAIT_TIMEOUT=5ms
wargs="-T 3 -n $n -x 1" spawn "$work/c10.tx" PGAPPNAME=c10 DBTHROTTLE_POOL=c10 DBTHROTTLE_MAX_QUERIES=3 $c10_env
bad=0
for p in $spawned_list; do wait "$p" || bad=$((bad + 1)); done
spawned_list=
okp=$(sum_field ok "$work/c10.plain")
okx=$(sum_field ok "$work/c10.tx")
okt=$(sum_field ok "$work/c10.timeout")
errt=$(sum_field err "$work/c10.timeout")
check "threads_share_a_pool: every worker exited cleanly ($bad bad exits)" '[ "$bad" -eq 0 ]'
check "threads_share_a_pool: $okp of $((6 * n)) plain and $okx of $((3 * n)) transactions ran; $okt ran and $errt timed out of $((3 * n)) impatient ones" '[ "$okp" -eq $((6 * n)) ] && [ "$okx" -eq $((3 * n)) ] && [ $((okt + errt)) -ge $((3 * n)) ]'
c10_counted=$(grep -h 'event=summary pool=c10 ' "$work/workers.err" 2>/dev/null | grep -oE '(unthrottled|redis_errors)=[0-9]+' | sort | uniq -c | tr -s ' \n' ' ')
check "threads_share_a_pool: at most 3 at once at the server (most seen: $(max_conc c10); the workers' summaries:${c10_counted:- none})" '[ "$(max_conc c10)" -le 3 ]'
check "threads_share_a_pool: nothing held or queued in the end" 'nothing_left q dbthrottle: 3'
