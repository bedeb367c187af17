# threads_share_a_pool.sh - threads, for the checkers (ASan, TSan, valgrind run the suite's workers with their own
# builds; make check-*). 12 threads share MAX_QUERIES=3: grants, handovers, waits that time out
# (a 5 ms DBTHROTTLE_WAIT_TIMEOUT), transactions that keep a permit across statements.
echo "# threads_share_a_pool: threads: handovers, timeouts and transactions${DBT_WRAP:+ (under ${DBT_WRAP%% *})}${DBT_LIB:+ ($(basename "$DBT_LIB"))}"
mark
n=20
[ -n "${DBT_WRAP:-}" ] && n=5 # valgrind is some 30 times slower
wargs="-T 6 -n $n -s 2" spawn "$work/c10.plain" PGAPPNAME=c10 DBTHROTTLE_POOL=c10 DBTHROTTLE_MAX_QUERIES=3
wargs="-T 3 -n $n -s 2" spawn "$work/c10.timeout" PGAPPNAME=c10 DBTHROTTLE_POOL=c10 DBTHROTTLE_MAX_QUERIES=3 DBTHROTTLE_WAIT_TIMEOUT=5ms
wargs="-T 3 -n $n -x 1" spawn "$work/c10.tx" PGAPPNAME=c10 DBTHROTTLE_POOL=c10 DBTHROTTLE_MAX_QUERIES=3
bad=0
for p in $spawned_list; do wait "$p" || bad=$((bad + 1)); done
spawned_list=
okp=$(sum_field ok "$work/c10.plain")
okx=$(sum_field ok "$work/c10.tx")
okt=$(sum_field ok "$work/c10.timeout")
errt=$(sum_field err "$work/c10.timeout")
check "threads_share_a_pool: every worker exited cleanly ($bad bad exits)" '[ "$bad" -eq 0 ]'
check "threads_share_a_pool: $okp of $((6 * n)) plain and $okx of $((3 * n)) transactions ran; $okt ran and $errt timed out of $((3 * n)) impatient ones" '[ "$okp" -eq $((6 * n)) ] && [ "$okx" -eq $((3 * n)) ] && [ $((okt + errt)) -ge $((3 * n)) ]'
check "threads_share_a_pool: at most 3 at once at the server (most seen: $(max_conc c10))" '[ "$(max_conc c10)" -le 3 ]'
check "threads_share_a_pool: nothing held or queued in the end" 'nothing_left q dbthrottle: 3'
