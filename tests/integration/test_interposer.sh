#!/bin/sh
# test_interposer.sh [CASE...] - libdbthrottle.so preloaded into unmodified libpq programs (psql,
# pgbench, client libraries), against a redis-server and a PostgreSQL this script starts on free
# loopback ports and stops. Each case is a function it_NAME below; with no names all run, in the
# order of $cases (make test-integration T=pgbench_modes runs one). Prints one line per check and
# "N passed, N failed" at the end; exits non-zero on a failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
cases="limit_holds_at_the_server transaction_is_one_permit log_query cache_permits
    no_deadlock_with_lock_waiters refusal_reads_like_a_libpq_error bad_setting_refuses
    programs_without_libpq_untouched same_results_throttled pgbench_modes copy_holds_one_permit
    fork_child_takes_its_own client_libraries exempt_connections idle_in_transaction_warning
    connection_permits large_objects psycopg2_async interactive_psql dlsym_returns_our_hooks
    psycopg3_cancel_ends_wait one_server_one_pool"
cases="$cases held_send_returns_at_once held_refused_at_timeout held_refused_in_transaction
    held_cancelled held_request_cancel held_drained held_blocking_get_result held_second_send_refused
    held_exec_after held_two_connections_one_loop held_prepared held_pipeline held_pipeline_refused
    held_finish held_reset held_fork held_nonblocking held_notifications_while_held
    held_pipeline_finish held_backend_terminated held_many_connections_one_loop held_races_with_the_grant
    held_single_row_mode held_notice_processor_asks_libpq held_pipeline_abort_then_more"
cases="$cases class_ids_name_the_class weights_take_units_at_the_server prepared_weighed_by_its_text prepared_behind_a_held_command_weighed_by_its_text
    class_queue_cap_refuses_at_once class_wait_replaces_wait_timeout kept_permit_serves_its_weight_only
    class_wait_refusal_names_the_class_wait"
cases="$cases holders_show_their_session"
pick_cases "$@"
harness_begin it

# ---- shared by every case: the servers, a table, helpers -----------------------------------------
redis_start
pg_start
counter_install
psql -qAt -c "create table r (id int primary key, v int); insert into r values (1, 0)" >/dev/null
logfile=$work/pg/server.log
# Debian's own interpreters (a PATH may put another python3 first).
py=/usr/bin/python3

wait_holders() { # wait_holders q|c N: until the pools hold N permits of that kind (10 s at most)
    i=0
    until [ "$(rcli --raw eval "local n = 0 for _, k in ipairs(redis.call('keys', 'dbthrottle:*:$1:holders')) do n = n + redis.call('zcard', k) end return n" 0)" = "$2" ] || [ $i -ge 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
}

# ---- the cases -----------------------------------------------------------------------------------
# the limit holds at the server
it_limit_holds_at_the_server() {
    # Every statement's start and end come from the server's own log; their largest overlap is the
    # most statements that ran at once. The log's clock has millisecond steps, so each interval is
    # shortened by 1 ms: a false overlap is then impossible, and a real one (a statement too many
    # runs a whole 50 ms) is still seen.
    psql -qAt -c "alter system set log_min_duration_statement = 0" \
        -c "alter system set log_line_prefix = '%m '" -c "select pg_reload_conf()" >/dev/null
    echo "select pg_sleep(0.05);" >"$work/sleep.sql"
    start_line=$(wc -l <"$logfile")
    t0=$(date +%s.%N)
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG=$work/trace1.log DBTHROTTLE_LOG_LEVEL=info \
        pgbench -n -c 32 -j 32 -t 5 -f "$work/sleep.sql" >"$work/pgbench1.out" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    psql -qAt -c "alter system reset log_min_duration_statement" -c "select pg_reload_conf()" >/dev/null
    check "pgbench -c 32 under MAX_QUERIES=4 completes" [ $rc -eq 0 ]
    tail -n +"$((start_line + 1))" "$logfile" | grep 'statement: select pg_sleep(0.05)' >"$work/stmts"
    max=$(awk '{
        split($2, t, ":"); end = t[1] * 3600 + t[2] * 60 + t[3];
        for (i = 1; i <= NF; i++) if ($i == "duration:") d = $(i + 1) / 1000;
        printf "%.6f 1\n%.6f -1\n", end - d, end - 0.001 }' "$work/stmts" | sort -k1,1n -k2,2n |
        awk '{ cur += $2; if (cur > max) max = cur } END { print max + 0 }')
    n=$(wc -l <"$work/stmts")
    check "160 statements ran (saw $n)" [ "$n" -eq 160 ]
    check "at most 4 statements at once at the server (saw $max)" [ "$max" -le 4 ]
    check "the limit was reached (saw $max)" [ "$max" -eq 4 ]
    rate=$(echo "$t0 $t1" | awk '{ printf "%.1f", 160 / ($2 - $1) }')
    info "160 x pg_sleep(0.05) at limit 4: $rate statements/s (ideal 80, with 32 connects)"
    grants=$(grep -c 'event=grant' "$work/trace1.log")
    check "one grant per statement (saw $grants)" [ "$grants" -eq 160 ]
}

# a transaction is one permit, a single command one too
it_transaction_is_one_permit() {
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG=$work/trace2.log DBTHROTTLE_LOG_LEVEL=info \
        psql -qAt -c "begin" -c "select 1" -c "update r set v = v where id = 1" -c "commit" >/dev/null
    grants=$(grep -c 'event=grant' "$work/trace2.log")
    releases=$(grep -c 'event=release' "$work/trace2.log")
    check "BEGIN ... COMMIT over four commands takes one grant (saw $grants)" [ "$grants" -eq 1 ]
    check "and gives it back once (saw $releases)" [ "$releases" -eq 1 ]
    grants=$(throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=info \
        psql -qAt -c "select 1" 2>&1 >/dev/null | grep -c 'event=grant')
    check "a single psql -c command takes one grant (saw $grants)" [ "$grants" -eq 1 ]
}

# DBTHROTTLE_LOG_QUERY puts the query in the trace, or not
it_log_query() {
    # DBTHROTTLE_LOG_QUERY: the command's text in its grant and release lines (quoted, escaped, cut
    # at 1 KiB with "..."), and never when off.
    long=$(python3 -c 'print("select 1 /*" + "x" * 2000 + "*/")')
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_LOG_QUERY=on \
        DBTHROTTLE_LOG=$work/query_on.log psql -qAt -c 'select '"'"'a "quoted"'"'"' as q' -c "$long" >/dev/null
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_LOG=$work/query_off.log \
        psql -qAt -c "select 42" >/dev/null
    check "LOG_QUERY=on: grant and release carry the query, escaped; a 2 KB one is cut at 1 KiB with ..." \
        python3 - "$work/query_on.log" <<'PY'
import re, sys
lines = [l for l in open(sys.argv[1]) if re.search(r"event=(grant|release) ", l)]
q = [re.search(r' query="((?:[^"\\]|\\.)*)"', l).group(1) for l in lines]
assert q[0] == q[1] == 'select \'a \\"quoted\\"\' as q', q[:2]
assert q[2] == q[3] and q[2].startswith("select 1 /*xxx") and q[2].endswith("x..."), q[2][-20:]
assert 1000 <= len(q[2]) <= 1030, len(q[2])
PY
    check "LOG_QUERY=off (the default): no query text in the trace" \
        'grep -q "event=grant" "$work/query_off.log" && ! grep -q "query=" "$work/query_off.log"'
}

# DBTHROTTLE_CACHE_PERMITS: one grant for back-to-back commands
it_cache_permits() {
    # DBTHROTTLE_CACHE_PERMITS=on: back-to-back commands of one connection share one grant; the permit
    # goes back by itself once idle, before the program ends.
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=debug DBTHROTTLE_CACHE_PERMITS=on \
        DBTHROTTLE_LOG=$work/cache.log psql -qAt -c "select 1" -c "select 2" -c "select 3" \
        -c "select pg_sleep(0.3)" -c "select 4" >/dev/null
    grants=$(grep -c 'event=grant' "$work/cache.log")
    reuses=$(grep -c 'event=reuse' "$work/cache.log")
    check "CACHE_PERMITS=on: 5 commands of one psql, 1 grant and 4 reuses (saw $grants, $reuses)" \
        '[ "$grants" -eq 1 ] && [ "$reuses" -eq 4 ] && [ "$(grep -c "event=release" "$work/cache.log")" -eq 1 ]'
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_CACHE_PERMITS=on \
        DBTHROTTLE_CACHE_IDLE=100ms DBTHROTTLE_LOG=$work/cache_idle.log \
        psql -qAt -c "select 1" -c '\! sleep 1' -c "select 2" >/dev/null
    check "CACHE_PERMITS=on, CACHE_IDLE=100ms: a permit idle for 1 s went back by itself, and the next command took a new one" \
        'grep -q "event=release.*reason=\"kept idle for DBTHROTTLE_CACHE_IDLE\"" "$work/cache_idle.log" && [ "$(grep -c "event=grant" "$work/cache_idle.log")" -eq 2 ]'
}

# no deadlock between a transaction and the lock waiters
it_no_deadlock_with_lock_waiters() {
    # MAX_QUERIES=2: T1 updates r in a transaction and then sleeps; T2 and T3 want the same row. If T1
    # gave its permit back between statements, T2 and T3 would hold both permits, blocked on T1's row
    # lock, and T1 could never get one to COMMIT.
    psql -qAt -c "update r set v = 0" >/dev/null
    throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=20s psql -qAt -v ON_ERROR_STOP=1 \
        -c "begin" -c "update r set v = v + 1 where id = 1" -c "select pg_sleep(1)" -c "commit" \
        >/dev/null 2>"$work/t1.err" &
    p1=$!
    sleep 0.3
    throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=20s psql -qAt -v ON_ERROR_STOP=1 \
        -c "update r set v = v + 1 where id = 1" >/dev/null 2>"$work/t2.err" &
    p2=$!
    throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=20s psql -qAt -v ON_ERROR_STOP=1 \
        -c "update r set v = v + 1 where id = 1" >/dev/null 2>"$work/t3.err" &
    p3=$!
    wait $p1; r1=$?
    wait $p2; r2=$?
    wait $p3; r3=$?
    v=$(psql -qAt -c "select v from r where id = 1")
    check "the transaction and both lock waiters complete (rc $r1 $r2 $r3)" \
        '[ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ]'
    check "all three updates applied (v=$v)" [ "$v" = 3 ]
}

# a refusal reads like a libpq error
it_refusal_reads_like_a_libpq_error() {
    throttled DBTHROTTLE_MAX_QUERIES=1 psql -qAt -c "select pg_sleep(3)" >/dev/null 2>&1 &
    holder=$!
    wait_holders q 1
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=200ms psql -qAt -c "select 1" \
        >"$work/refused.out" 2>"$work/refused.err"
    rc=$?
    check "psql refused: exits non-zero (rc $rc)" [ $rc -ne 0 ]
    check "psql refused: says dbthrottle, the pool and the limit" \
        grep -q 'dbthrottle: no query permit for pool "localhost:[0-9]*/postgres" (limit 1) after waiting' "$work/refused.err"
    check "psql refused: nothing reached the server (no output)" [ ! -s "$work/refused.out" ]
    wait $holder
}

# bad configuration refuses rather than runs unthrottled
it_bad_setting_refuses() {
    throttled DBTHROTTLE_MAX_QUERIES=abc psql -qAt -c "select 1" >"$work/bad.out" 2>"$work/bad.err"
    rc=$?
    check "bad setting: psql fails (rc $rc)" [ $rc -ne 0 ]
    check "bad setting: one line naming the setting and the value" \
        grep -q 'DBTHROTTLE_MAX_QUERIES: bad value \\"abc\\"' "$work/bad.err"
}

# programs that never use libpq are untouched
it_programs_without_libpq_untouched() {
    out=$(throttled DBTHROTTLE_MAX_QUERIES=abc DBTHROTTLE_LOG_LEVEL=debug sh -c 'echo hi; ls / >/dev/null' 2>&1)
    check "a program without libpq prints nothing of ours, even with a bad setting" [ "$out" = hi ]
    threads=$(throttled DBTHROTTLE_MAX_QUERIES=4 sh -c 'ls /proc/self/task | wc -l')
    check "and starts no thread (threads: $threads)" [ "$threads" -eq 1 ]
    out=$(throttled DBTHROTTLE_MAX_QUERIES=4 /usr/bin/python3 -c 'print(1)' 2>&1)
    check "python3 without libpq: unchanged ($out)" [ "$out" = 1 ]
    out=$(timeout 20 env LD_PRELOAD="$lib $top/build/tests/libnext_preload.so" DBTHROTTLE_MAX_QUERIES=4 id -u 2>&1)
    check "another preload's dlsym(RTLD_NEXT) still finds libc, not itself ($out)" [ "$out" = "$(id -u)" ]
    direct=$(/sbin/ldconfig -p | head -3)
    through=$(throttled DBTHROTTLE_MAX_QUERIES=4 /sbin/ldconfig -p 2>&1 | head -3)
    check "a static binary (ldconfig) runs unchanged" [ "$direct" = "$through" ]
}

# throttled pgbench gives the same results
it_same_results_throttled() {
    direct=$(psql -qAt -c "select count(*), sum(v) from r")
    through=$(throttled DBTHROTTLE_MAX_QUERIES=2 psql -qAt -c "select count(*), sum(v) from r")
    check "same result with and without the preload" [ "$direct" = "$through" ]
}

# pgbench's modes and pipelines: one grant per transaction or pipeline
it_pgbench_modes() {
    printf 'BEGIN;\nSELECT 1;\nSELECT 2;\nEND;\n' >"$work/tx.sql"
    for mode in simple extended prepared; do
        # -M prepared also prepares its statements once per connection: 4 more commands.
        want=80
        [ $mode = prepared ] && want=84
        rm -f "$work/trace8.log"
        throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace8.log DBTHROTTLE_LOG_LEVEL=info \
            pgbench -n -M $mode -c 4 -j 4 -t 20 -f "$work/tx.sql" >/dev/null 2>&1
        rc=$?
        grants=$(grep -c 'event=grant' "$work/trace8.log")
        check "pgbench -M $mode: 80 transactions, $want grants (rc $rc, saw $grants)" \
            '[ $rc -eq 0 ] && [ "$grants" -eq $want ]'
    done
    printf '\\startpipeline\nSELECT 1;\nSELECT 2;\nSELECT 3;\n\\endpipeline\n' >"$work/pipe.sql"
    rm -f "$work/trace8.log"
    throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace8.log DBTHROTTLE_LOG_LEVEL=info \
        pgbench -n -M extended -c 4 -j 4 -t 20 -f "$work/pipe.sql" >"$work/pipe.out" 2>&1
    rc=$?
    grants=$(grep -c 'event=grant' "$work/trace8.log")
    releases=$(grep -c 'event=release' "$work/trace8.log")
    check "pgbench pipelines: 80 pipelines, 80 grants, 80 releases (rc $rc, saw $grants/$releases)" \
        '[ $rc -eq 0 ] && [ "$grants" -eq 80 ] && [ "$releases" -eq 80 ]'

    rm -f "$work/trace8.log"
    out=$(throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace8.log DBTHROTTLE_LOG_LEVEL=info \
        "$top/build/tests/pipeline_client" 2>&1)
    grants=$(grep -c 'event=grant' "$work/trace8.log")
    releases=$(grep -c 'event=release' "$work/trace8.log")
    check "staying in pipeline mode: 3 batches, 3 grants, each back after its sync ($out; $grants/$releases)" \
        '[ "$out" = "pipeline on sum 69" ] && [ "$grants" = 3 ] && [ "$releases" = 3 ]'
}

# COPY holds one permit until it ends
it_copy_holds_one_permit() {
    psql -qAt -c "create table big (n int)" >/dev/null
    seq 1 100000 >"$work/rows"
    rm -f "$work/trace9.log"
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LOG=$work/trace9.log DBTHROTTLE_LOG_LEVEL=info \
        psql -qAt -c "\\copy big from '$work/rows'" -c "\\copy big to '$work/out'" >/dev/null 2>&1
    rc=$?
    grants=$(grep -c 'event=grant' "$work/trace9.log")
    lines=$(wc -l <"$work/out")
    check "COPY FROM and COPY TO of 100 000 rows: one grant each (rc $rc, saw $grants, $lines rows)" \
        '[ $rc -eq 0 ] && [ "$grants" -eq 2 ] && [ "$lines" -eq 100000 ]'
}

# fork: the child starts with no permit and takes its own
it_fork_child_takes_its_own() {
    rm -f "$work/trace10.log"
    out=$(throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG=$work/trace10.log DBTHROTTLE_LOG_LEVEL=info \
        "$top/build/tests/fork_client" 2>&1)
    rc=$?
    pids=$(grep 'event=grant' "$work/trace10.log" | sed 's/.* pid=\([0-9]*\).*/\1/' | sort -u | wc -l)
    grants=$(grep -c 'event=grant' "$work/trace10.log")
    check "fork: parent and child both run (rc $rc, $out)" '[ $rc -eq 0 ] && [ "$out" = "child ok" ]'
    check "fork: two grants from two processes (saw $grants from $pids)" \
        '[ "$grants" -eq 2 ] && [ "$pids" -eq 2 ]'
}

# client libraries, unmodified: one grant per transaction, refusals with SQLSTATE 53300
it_client_libraries() {
    lang_grants() { # lang_grants NAME command...: runs it throttled, prints its grant count
        name=$1
        shift
        rm -f "$work/lang.log"
        throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/lang.log DBTHROTTLE_LOG_LEVEL=info \
            "$@" >"$work/lang.out" 2>&1 || { info "$name failed: $(cat "$work/lang.out")"; echo -1; return; }
        grep -c 'event=grant' "$work/lang.log"
    }
    # Each runs one transaction of two statements, then one statement on its own: two grants.
    g=$(lang_grants psycopg2 $py -c "
import psycopg2
c = psycopg2.connect('')
cur = c.cursor()
cur.execute('select 1'); cur.execute('select 2'); c.commit()
c.autocommit = True
cur.execute('select 3')")
    check "psycopg2: transaction + statement = 2 grants (saw $g)" [ "$g" = 2 ]
    g=$(lang_grants psycopg3 $py -c "
import psycopg
assert psycopg.pq.__impl__ == 'python'  # libpq through ctypes: dlopen + dlsym
with psycopg.connect('') as c:
    with c.transaction():
        c.execute('select 1'); c.execute('select 2')
    c.autocommit = True
    c.execute('select 3')")
    check "psycopg 3 through ctypes: 2 grants (saw $g)" [ "$g" = 2 ]
    g=$(lang_grants ruby-pg ruby -e '
    require "pg"
    c = PG.connect(host: ENV["PGHOST"], port: ENV["PGPORT"], user: "postgres", dbname: "postgres")
    c.transaction { c.exec("select 1"); c.exec("select 2") }
    c.exec("select 3")')
    check "ruby-pg: 2 grants (saw $g)" [ "$g" = 2 ]
    g=$(lang_grants DBD::Pg perl -MDBI -e '
    my $d = DBI->connect("dbi:Pg:", "", "", {RaiseError => 1, AutoCommit => 1});
    $d->begin_work; $d->do("select 1"); $d->do("select 2"); $d->commit;
    $d->do("select 3");')
    check "Perl DBD::Pg: 2 grants (saw $g)" [ "$g" = 2 ]
    # PHP loads pgsql.so with RTLD_DEEPBIND: covered by the dlopen hook.
    g=$(lang_grants php-pgsql php -r '
    $c = pg_connect("host=" . getenv("PGHOST") . " port=" . getenv("PGPORT") . " user=postgres");
    pg_query($c, "begin"); pg_query($c, "select 1"); pg_query($c, "select 2"); pg_query($c, "commit");
    pg_query($c, "select 3");')
    check "PHP pgsql: 2 grants (saw $g)" [ "$g" = 2 ]

    throttled DBTHROTTLE_MAX_QUERIES=1 psql -qAt -c "select pg_sleep(3)" >/dev/null 2>&1 &
    holder=$!
    wait_holders q 1
    out=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=100ms DBTHROTTLE_LOG_LEVEL=error $py -c "
import psycopg2
c = psycopg2.connect('')
try:
    c.cursor().execute('select 1')
except psycopg2.OperationalError as e:
    print(e.pgcode, str(e).split(':')[0])" 2>&1)
    check "psycopg2 refused: OperationalError, SQLSTATE 53300 ($out)" [ "$out" = "53300 dbthrottle" ]
    out=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=100ms DBTHROTTLE_LOG_LEVEL=error perl -MDBI -e '
    my $d = DBI->connect("dbi:Pg:", "", "", {PrintError => 0});
    $d->do("select 1") and exit 1; print $d->state, "\n";' 2>&1)
    check "DBD::Pg refused: SQLSTATE 53300 ($out)" [ "$out" = 53300 ]
    out=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=100ms DBTHROTTLE_LOG_LEVEL=error php -r '
    $c = pg_connect("host=" . getenv("PGHOST") . " port=" . getenv("PGPORT") . " user=postgres");
    if (@pg_query($c, "select 1") === false) echo substr(pg_last_error($c), 0, 11);' 2>&1)
    check "PHP refused: pg_query fails with the dbthrottle message ($out)" [ "$out" = "dbthrottle:" ]
    wait $holder
}

# exempt connections get through a pool blocked on a lock
it_exempt_connections() {
    # A plain (unthrottled) session holds r's row lock; two throttled sessions take both permits and
    # block on it. A monitoring connection named by DBTHROTTLE_EXEMPT still runs at once; an ordinary
    # one is refused.
    psql -qAt -c "begin" -c "update r set v = v where id = 1" -c "select pg_sleep(4)" -c "commit" \
        >/dev/null 2>&1 &
    locker=$!
    sleep 0.3
    blocked=
    for i in 1 2; do
        throttled DBTHROTTLE_MAX_QUERIES=2 psql -qAt -c "update r set v = v where id = 1" \
            >/dev/null 2>&1 &
        blocked="$blocked $!"
    done
    i=0
    until [ "$(psql -qAt -c "select count(*) from pg_stat_activity where wait_event_type = 'Lock'")" = 2 ] || [ $i -ge 100 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    rm -f "$work/trace12.log"
    t0=$(date +%s%N)
    out=$(throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_EXEMPT='application_name=pg_monitor*,user=nobody' \
        DBTHROTTLE_LOG=$work/trace12.log DBTHROTTLE_LOG_LEVEL=info PGAPPNAME=pg_monitor_probe \
        psql -qAt -c "select 'monitor ok'" 2>&1)
    t1=$(date +%s%N)
    check "exempt monitoring connection runs while the pool is saturated ($out)" [ "$out" = "monitor ok" ]
    check "it took no permit, and the trace says why" \
        '! grep -q event=grant "$work/trace12.log" && grep -q "event=exempt .*rule=pg_monitor\*" "$work/trace12.log"'
    info "exempt query answered in $(( (t1 - t0) / 1000000 )) ms while the pool was saturated"
    throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=200ms PGAPPNAME=app \
        psql -qAt -c "select 1" >/dev/null 2>&1
    rc=$?
    check "an ordinary connection is refused meanwhile (rc $rc)" [ $rc -ne 0 ]
    wait $locker $blocked
}

# a permit held idle in a transaction is reported
it_idle_in_transaction_warning() {
    rm -f "$work/trace13.log"
    ( echo "begin;"; echo "select 1;"; sleep 1.5; echo "commit;" ) |
        throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_IDLE_IN_TX_WARN=300ms DBTHROTTLE_LEASE=600ms \
            DBTHROTTLE_LOG=$work/trace13.log psql -qAt >/dev/null 2>&1
    check "idle in transaction longer than DBTHROTTLE_IDLE_IN_TX_WARN: one warning" \
        '[ "$(grep -c "level=warn event=idle_in_transaction" "$work/trace13.log")" = 1 ]'
}

# connection permits: at most N backends open at once
it_connection_permits() {
    # Each session's life comes from the server log, by backend pid: from "connection authorized"
    # to the end of its statement (its "duration:" line), the last thing the session does before
    # its client closes it and gives the permit back; their largest overlap is the most sessions
    # open at once. (Not to the backend's "disconnection" line: a backend logs it as it exits,
    # after its client has closed and released, and on a loaded machine that came after the next
    # session had started: 3 "at once" at a limit of 2, with every client within its permit.)
    psql -qAt -c "alter system set log_connections = on" -c "alter system set log_disconnections = on" \
        -c "alter system set log_min_duration_statement = 0" \
        -c "alter system set log_line_prefix = '%m [%p] '" -c "select pg_reload_conf()" >/dev/null
    start_line=$(wc -l <"$logfile")
    pids=
    for i in 1 2 3 4 5; do
        throttled DBTHROTTLE_MAX_CONNECTIONS=2 DBTHROTTLE_WAIT_TIMEOUT=30s PGAPPNAME=conntest \
            psql -qAt -c "select pg_sleep(0.3)" >/dev/null 2>&1 &
        pids="$pids $!"
    done
    rcs=0
    for p in $pids; do wait $p || rcs=$((rcs + 1)); done
    psql -qAt -c "alter system reset log_connections" -c "alter system reset log_disconnections" \
        -c "alter system reset log_min_duration_statement" -c "select pg_reload_conf()" >/dev/null
    tail -n +"$((start_line + 1))" "$logfile" >"$work/conns"
    maxc=$(awk '
        function t(s,  a) { split(s, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
        /connection authorized: .*application_name=conntest/ { gsub(/[][]/, "", $4); start[$4] = t($2) }
        / duration: / { p = $4; gsub(/[][]/, "", p); if (p in start) end[p] = t($2) }
        END { for (p in start) if (p in end) printf "%.6f 1\n%.6f -1\n", start[p], end[p] }
        ' "$work/conns" | sort -k1,1n -k2,2n | awk '{ cur += $2; if (cur > max) max = cur } END { print max + 0 }')
    nended=$(grep -c ' duration: .*pg_sleep(0.3)' "$work/conns")
    nconn=$(grep -c 'connection authorized: .*application_name=conntest' "$work/conns")
    check "MAX_CONNECTIONS=2, 5 clients: all ran (failures: $rcs, backends: $nconn)" \
        '[ $rcs -eq 0 ] && [ "$nconn" -eq 5 ]'
    check "never more than 2 sessions open at once (saw $maxc; $nended of the 5 statements' ends logged)" \
        '[ "$maxc" -le 2 ] && [ "$maxc" -ge 1 ] && [ "$nended" -ge 5 ]'
    # The permit goes back once the connection is closed, not before: in the client's own system
    # calls, the close of its PostgreSQL socket comes before the release.lua sent for the permit
    # (the other way round, the connection it admits could open while this one still is).
    throttled DBTHROTTLE_MAX_CONNECTIONS=1 strace -f -qq -s 512 -o "$work/finish.strace" \
        -e trace=connect,close,write,writev,sendto,sendmsg psql -qAt -c "select 1" >/dev/null 2>&1
    release_sha=$(sed -n 's/.*dbt_script_release = {"release", body_release, [0-9]*, "\([0-9a-f]*\)"};/\1/p' \
        "$top/build/gen/scripts.c")
    order=$(awk -v port="$PGPORT" -v sha="$release_sha" '
        /connect\(/ && index($0, "htons(" port ")") && !fd { match($0, /connect\([0-9]+/); fd = substr($0, RSTART + 8, RLENGTH - 8) }
        fd && !closed && index($0, "close(" fd ")") { closed = NR }
        sha && index($0, sha) && /:c:holders/ { release = NR }
        END { if (closed && release > closed) print "closed, then released"
              else print "released at line " release ", closed at line " closed }' "$work/finish.strace")
    check "a connection permit goes back after its socket is closed ($order)" \
        '[ "$order" = "closed, then released" ]'
    throttled DBTHROTTLE_MAX_CONNECTIONS=1 psql -qAt -c "select pg_sleep(2)" >/dev/null 2>&1 &
    holder=$!
    wait_holders c 1
    throttled DBTHROTTLE_MAX_CONNECTIONS=1 DBTHROTTLE_WAIT_TIMEOUT=200ms psql -qAt -c "select 1" \
        >/dev/null 2>"$work/connrefused.err"
    rc=$?
    check "a refused connection: psql fails with the dbthrottle message (rc $rc)" \
        '[ $rc -ne 0 ] && grep -q "dbthrottle: no connection permit for pool" "$work/connrefused.err"'
    wait $holder
}

# large objects (lo_* through PQfn), outside and inside a transaction
it_large_objects() {
    printf 'large object payload\n' >"$work/lo.txt"
    chmod 644 "$work/lo.txt"
    rm -f "$work/trace15.log"
    out=$(throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace15.log DBTHROTTLE_LOG_LEVEL=info \
        psql -At -c "\\lo_import '$work/lo.txt'" 2>&1)
    grants=$(grep -c 'event=grant' "$work/trace15.log")
    releases=$(grep -c 'event=release' "$work/trace15.log")
    check "\\lo_import: imported ($out), every grant released ($grants/$releases)" \
        '[ "${out#lo_import }" != "$out" ] && [ "$grants" -ge 1 ] && [ "$grants" = "$releases" ]'
}

# psycopg2 asynchronous mode, driven by a select() loop
it_psycopg2_async() {
    rm -f "$work/trace16.log"
    out=$(throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace16.log DBTHROTTLE_LOG_LEVEL=info \
        $py -c "
import select, psycopg2, psycopg2.extensions as ext
def wait(conn):
    while True:
        state = conn.poll()
        if state == ext.POLL_OK:
            return
        if state == ext.POLL_READ:
            select.select([conn.fileno()], [], [])
        elif state == ext.POLL_WRITE:
            select.select([], [conn.fileno()], [])
conn = psycopg2.connect('', async_=True)
wait(conn)
cur = conn.cursor()
for q in ('select 1', 'select 2', 'select pg_sleep(0.1), 3'):
    cur.execute(q)
    wait(conn)
print(cur.fetchone()[1])" 2>&1)
    grants=$(grep -c 'event=grant' "$work/trace16.log")
    releases=$(grep -c 'event=release' "$work/trace16.log")
    check "psycopg2 async: results right ($out), one grant and release per statement ($grants/$releases)" \
        '[ "$out" = 3 ] && [ "$grants" = 3 ] && [ "$releases" = 3 ]'
}

# interactive psql, typed at in a terminal (tmux)
it_interactive_psql() {
    if command -v tmux >/dev/null; then
        rm -f "$work/trace17.log"
        sock=$work/tmux.sock
        tmux -S "$sock" new-session -d -x 120 -y 30 \
            "env LD_PRELOAD=$preload DBTHROTTLE_REDIS_URL=$DBTHROTTLE_REDIS_URL DBTHROTTLE_MAX_QUERIES=2 \
             DBTHROTTLE_LOG=$work/trace17.log DBTHROTTLE_LOG_LEVEL=info PGHOST=$PGHOST PGPORT=$PGPORT \
             PGUSER=postgres PGDATABASE=postgres psql -X; sleep 30"
        i=0
        until tmux -S "$sock" capture-pane -p | grep -q 'postgres=#' || [ $i -ge 100 ]; do sleep 0.05; i=$((i + 1)); done
        # tmux reads a trailing ';' as the end of its own command: "\\;" is a literal one
        for line in "select 'typed' || 'in'" "begin" "select 2" "commit"; do
            tmux -S "$sock" send-keys -l "$line\\;"
            tmux -S "$sock" send-keys Enter
        done
        i=0
        until [ "$(grep -c 'event=release' "$work/trace17.log" 2>/dev/null)" = 2 ] || [ $i -ge 100 ]; do sleep 0.05; i=$((i + 1)); done
        screen=$(tmux -S "$sock" capture-pane -p)
        tmux -S "$sock" kill-server 2>/dev/null
        grants=$(grep -c 'event=grant' "$work/trace17.log")
        check "interactive psql: the screen shows the result, 2 grants for a query and a transaction ($grants)" \
            'echo "$screen" | grep -q typedin && [ "$grants" = 2 ]'
    fi
}

# a libpq found through dlsym(handle, name) hands out our hooks: ctypes (psycopg 3) dlopen()s
# libpq and asks the handle for each function: every PQ/lo_ function the library exports must
# come back as ours, or that program calls libpq unthrottled
it_dlsym_returns_our_hooks() {
    names=$(nm -D --defined-only "$lib" | awk '$3 ~ /^(PQ|lo_)/ {print $3}')
    listed=$(wc -l <"$top/build/gen/hooks.list")
    out=$(throttled DBTHROTTLE_MAX_QUERIES=4 "$top/build/tests/dlsym_check" "$lib" $names 2>&1)
    check "dlsym(dlopen(\"libpq.so.5\"), name) is our hook for each exported libpq function ($out)" \
        '[ "$out" = "dlsym: $listed of $listed hooks" ]'
}

# psycopg 3 calls libpq through ctypes: its cancel() must reach our PQcancel and end the wait
it_psycopg3_cancel_ends_wait() {
    throttled DBTHROTTLE_MAX_QUERIES=1 psql -qAt -c "select pg_sleep(4)" >/dev/null 2>&1 &
    holder=$!
    wait_holders q 1
    out=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=20s $py -c "
import threading, time, psycopg
assert psycopg.pq.__impl__ == 'python'  # libpq through ctypes: dlopen + dlsym
c = psycopg.connect('', autocommit=True)
t = threading.Timer(0.3, c.cancel)
t.start()
t0 = time.monotonic()
try:
    c.execute('select 1')
    res = 'ran'
except psycopg.Error as e:
    res = 'cancelled' if 'canceling statement due to user request' in str(e) else repr(e)
print('%s %.1f' % (res, time.monotonic() - t0))" 2>&1)
    check "psycopg 3 through ctypes: cancel() ends a wait for a permit at once, with the cancel's error ($out)" \
        'echo "$out" | grep -q "^cancelled [01]\."'
    wait $holder
}

# one server is one pool, however the clients spell it: by host name, by address, through the Unix
# socket, by hostaddr=, through a service file; measured at the server (the counter's advisory
# locks) and in Redis (the pools that have keys)
it_one_server_one_pool() {
    printf '[dbt_svc]\nhost=localhost\nport=%s\n' "$PGPORT" >"$work/pg_service.conf"
    # spell N: the connection string of spelling N (each reaches the same server)
    spell() {
        case $1 in
        0) echo "host=127.0.0.1" ;;
        1) echo "host=localhost" ;;
        2) echo "host=$work/pg" ;;
        3) echo "host=db.invalid hostaddr=127.0.0.1" ;;
        4) echo "service=dbt_svc" ;;
        esac
    }
    # Queries: the pool is named once the connection is made (the address libpq connected to).
    mark
    pids=
    for n in 0 1 2 3 4; do
        for k in 1 2; do
            throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_KEY_PREFIX=onepool: DBTHROTTLE_WAIT_TIMEOUT=60s \
                PGSERVICEFILE="$work/pg_service.conf" PGAPPNAME=onepool \
                psql -qAt -d "$(spell $n)" -c "select dbt_probe(150)" -c "select dbt_probe(150)" \
                -c "select dbt_probe(150)" >/dev/null 2>>"$work/onepool.err" &
            pids="$pids $!"
        done
    done
    rcs=0
    for p in $pids; do wait "$p" || rcs=$((rcs + 1)); done
    m=$(max_conc onepool)
    n=$(probes onepool)
    check "5 spellings x 2 clients at MAX_QUERIES=4: all ran (failures: $rcs, probes: $n)" \
        '[ $rcs -eq 0 ] && [ "$n" -eq 30 ]'
    check "never more than 4 at the server across the spellings (saw $m)" '[ "$m" -le 4 ] && [ "$m" -ge 2 ]'
    pools=$(rcli --scan --pattern 'onepool:*' | sed 's/^onepool:{\([^}]*\)}.*/\1/' | sort -u)
    check "one pool in Redis for the 5 spellings ($(echo $pools))" '[ "$(echo "$pools" | wc -l)" -eq 1 ]'
    check "its name says the server is local, on its port ($(echo $pools))" \
        '[ "$pools" = "localhost:$PGPORT/postgres" ]'
    # Connections: the pool is named before the socket opens (the host resolved as libpq will).
    for n in 0 1 2 3 4; do
        throttled DBTHROTTLE_MAX_CONNECTIONS=2 DBTHROTTLE_KEY_PREFIX=onepoolc: \
            PGSERVICEFILE="$work/pg_service.conf" psql -qAt -d "$(spell $n)" -c "select 1" \
            >/dev/null 2>>"$work/onepool.err"
    done
    # psycopg2 connects with PQconnectStart/PQconnectPoll: the pool of its connection permit was
    # named by PQhost before libpq had chosen a host (its index -1), which crashed it.
    out=$(throttled DBTHROTTLE_MAX_CONNECTIONS=2 DBTHROTTLE_KEY_PREFIX=onepoolc: $py -c "
import psycopg2
c = psycopg2.connect('host=localhost')
cur = c.cursor()
cur.execute('select 41 + 1')
print(cur.fetchone()[0])" 2>&1)
    check "psycopg2 with a connection limit and the default pool: runs ($out)" '[ "$out" = 42 ]'
    pools=$(rcli --scan --pattern 'onepoolc:*' | sed 's/^onepoolc:{\([^}]*\)}.*/\1/' | sort -u)
    check "connection permits: one pool for the 5 spellings ($(echo $pools))" \
        '[ "$pools" = "localhost:$PGPORT/postgres" ]'
}

# ---- issue 15: held commands ---------------------------------------------------------------------
# A PQsend* call that finds no permit free returns at once; the library holds the command until it
# gets one (and sends it then) or is refused (the application then reads a 53300 or 57014 result).
# held_client (tests/integration/held_client.c) drives one connection through an event loop while a
# throttled psql holds the pool's only permit (a probe of the counter, so the server's log says
# when each statement ran and whether it ran beside another); each case has a pool of its own.

# hc_hold POOL APP MS: a throttled psql holds POOL's only permit for a MS ms probe ($hc_holder);
# returns once Redis has it holding and its probe runs at the server. Call mark first.
hc_hold() {
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=$1 PGAPPNAME=$2 DBTHROTTLE_WAIT_TIMEOUT=60s \
        psql -qAtX -c "select dbt_probe($3)" >/dev/null 2>&1 &
    hc_holder=$!
    echo "$hc_holder" >>"$work/pids"
    wait_until 10 "[ \"\$(hc_card $1 holders)\" = 1 ] && [ \"\$(probes $2)\" = 1 ]"
}
hc_card() { rcli zcard "dbthrottle:{$1}:q:$2"; } # hc_card POOL holders|queue
# hc_run POOL MODE [ENV=VALUE...]: held_client MODE in the background ($hc_pid) on POOL (its
# application_name is the pool's name too) at a limit of 1; its lines in $hc_out; hc_go STEP lets
# it pass step STEP. $HC_WRAP runs it under a tool (valgrind).
hc_run() {
    hc_pool=$1
    hc_mode=$2
    shift 2
    hc_out=$work/hc.$hc_pool.out
    rm -f "$hc_out" "$work/hc.$hc_pool.go".*
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=$hc_pool PGAPPNAME=$hc_pool \
        HELD_GO=$work/hc.$hc_pool.go "$@" timeout 120 ${HC_WRAP:-} "$top/build/tests/held_client" \
        "$hc_mode" >"$hc_out" 2>"$work/hc.$hc_pool.err" &
    hc_pid=$!
    echo "$hc_pid" >>"$work/pids"
}
hc_go() { touch "$work/hc.$hc_pool.go.$1"; }
hc_line() { wait_until 60 "grep -q '^$1=' \"\$hc_out\" 2>/dev/null"; } # hc_line KEY: until held_client said KEY
hc_val() { # hc_val KEY: what held_client said of KEY (its first line with it)
    awk -v k="$1=" '{ for (i = 1; i <= NF; i++) if (index($i, k) == 1) { print substr($i, length(k) + 1); exit } }' "$hc_out"
}
hc_ms() { hc_ms_v=$(hc_val "$1"); echo "${hc_ms_v:-999999}"; } # a number held_client said (or 999999)
hc_said() { tr '\n' ' ' <"$hc_out" | cut -c 1-400; } # for the check lines
# hc_sent_at_once: the PQsendQuery returned 1 within 1 s (the holder holds for seconds), and the
# connection then reads as busy with nothing to flush, and stays busy after PQconsumeInput.
hc_sent_at_once() {
    check "$hc_pool: PQsendQuery returns 1 at once while the permit is held elsewhere ($(hc_said))" \
        '[ "$(hc_val send)" = 1 ] && [ "$(hc_ms send_ms)" -lt 1000 ]'
    check "$hc_pool: then PQisBusy 1, PQflush 0, PQconsumeInput 1 and still busy" \
        '[ "$(hc_val busy)" = 1 ] && [ "$(hc_val flush)" = 0 ] && [ "$(hc_val consume)" = 1 ] && [ "$(hc_val busy_after_consume)" = 1 ]'
}
hc_not_run() { case $1 in PIPELINE_ABORTED,NULL | FATAL_ERROR*,NULL) return 0 ;; esac; return 1; }
hc_loop_ran() { # the event loop never stopped for 500 ms (10 ms ticks), the send included
    check "$hc_pool: the event loop never stalled (longest gap between ticks: $(hc_val maxgap_ms) ms)" \
        '[ -n "$(hc_val maxgap_ms)" ] && [ "$(hc_ms maxgap_ms)" -lt 500 ]'
}

# a. the permit held elsewhere: the send returns at once, the result comes once the holder is done
it_held_send_returns_at_once() {
    mark
    hc_hold held_a held_a 3000
    hc_run held_a wait DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    hc_loop_ran
    check "held_a: the socket became readable when the holder ended ($(hc_val ready_ms) ms after the send): the real result, then NULL ($(hc_val result); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = "TUPLES_OK:1,NULL" ] && [ "$(hc_ms ready_ms)" -ge 1000 ]'
    check "held_a: at the server, the held statement ran once, after the holder's ended (probes: $(probes held_a); it saw itself alone: $(hc_val result))" \
        '[ "$(probes held_a)" = 2 ] && [ "$(hc_val result)" = "TUPLES_OK:1,NULL" ]'
}

# b. refused at the wait timeout: the loop wakes, 53300 then NULL, the connection usable after
it_held_refused_at_timeout() {
    mark
    hc_hold held_b held_b 6000
    hc_run held_b refuse DBTHROTTLE_WAIT_TIMEOUT=1500ms
    hc_line tx
    queue=$(hc_card held_b queue)
    holders=$(hc_card held_b holders)
    hc_sent_at_once
    hc_loop_ran
    check "held_b: poll() woke at the 1.5 s wait timeout, not at the holder's end at 6 s (after $(hc_val ready_ms) ms)" \
        '[ "$(hc_ms ready_ms)" -ge 1400 ] && [ "$(hc_ms ready_ms)" -le 4500 ]'
    check "held_b: PQgetResult gives PGRES_FATAL_ERROR with SQLSTATE 53300 and the dbthrottle message, then NULL ($(hc_val result))" \
        '[ "$(hc_val result)" = "FATAL_ERROR:53300,NULL" ] && grep -q "^result_error=\"dbthrottle: no query permit" "$hc_out"'
    check "held_b: the transaction status is unchanged ($(hc_val tx))" '[ "$(hc_val tx)" = IDLE ]'
    check "held_b: after the refusal, Redis has it neither queued nor holding (queue $queue, holders $holders: the holder's)" \
        '[ "$queue" = 0 ] && [ "$holders" = 1 ]'
    wait "$hc_holder"
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_b: the connection is usable for the next command ($(hc_val next); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next)" = "TUPLES_OK:next" ]'
    check "held_b: the refused statement never reached the server (probes: $(probes held_b), the holder's)" \
        '[ "$(probes held_b)" = 1 ]'
    cancelled=$(rcli hget "dbthrottle:{held_b}:q:stats" cancelled)
    check "held_b: Redis counts the refused wait as cancelled ($cancelled), and nothing is held or queued in the end" \
        '[ "$cancelled" = 1 ] && [ "$(hc_card held_b queue)" = 0 ] && [ "$(hc_card held_b holders)" = 0 ]'
}

# b. the same inside a transaction block: the transaction's permit is evicted (the next command
# then queues again, design.md), the holder takes it, the held command is refused: still INTRANS
it_held_refused_in_transaction() {
    mark
    hc_run held_btx refuse_in_tx DBTHROTTLE_WAIT_TIMEOUT=1500ms DBTHROTTLE_LEASE=600ms
    hc_line tx_before
    permit=$(rcli zrange "dbthrottle:{held_btx}:q:holders" 0 -1 | head -1)
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=held_btx PGAPPNAME=held_btx DBTHROTTLE_LEASE=600ms \
        DBTHROTTLE_WAIT_TIMEOUT=60s psql -qAtX -c "select dbt_probe(6000)" >/dev/null 2>&1 &
    hc_holder=$!
    echo "$hc_holder" >>"$work/pids"
    wait_until 10 '[ "$(hc_card held_btx queue)" = 1 ]'
    "$top/build/dbthrottle" evict held_btx "$permit" >"$work/hc.evict.out" 2>&1
    # the holder runs; the transaction's process heard of the eviction (its renewal took the mark)
    wait_until 10 '[ "$(probes held_btx)" = 1 ] && [ -z "$(rcli hget "dbthrottle:{held_btx}:q:info" "evicted:$permit")" ]'
    check "held_btx: in a transaction (${permit:-no permit}), evicted, the holder runs ($(probes held_btx) probe)" \
        '[ -n "$permit" ] && [ "$(hc_val tx_before)" = INTRANS ] && [ "$(probes held_btx)" = 1 ]'
    hc_go evicted
    hc_line tx
    hc_sent_at_once
    check "held_btx: 53300 then NULL ($(hc_val result)), and still INTRANS ($(hc_val tx))" \
        '[ "$(hc_val result)" = "FATAL_ERROR:53300,NULL" ] && [ "$(hc_val tx)" = INTRANS ]'
    wait "$hc_holder"
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_btx: the transaction goes on and commits ($(hc_val next) $(hc_val tx_next), $(hc_val commit) $(hc_val tx_end); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(hc_val tx_next)" = INTRANS ] && [ "$(hc_val commit)" = COMMAND_OK ] && [ "$(hc_val tx_end)" = IDLE ]'
    check "held_btx: the refused statement never reached the server (probes: $(probes held_btx), the holder's)" \
        '[ "$(probes held_btx)" = 1 ]'
}

# c. a cancel (PQcancel from another thread) ends the hold with 57014
it_held_cancelled() {
    mark
    hc_hold held_c held_c 4000
    hc_run held_c cancel DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    hc_loop_ran
    check "held_c: PQcancel 300 ms after the send woke the loop before the holder's end ($(hc_val ready_ms) ms): 57014 then NULL ($(hc_val result))" \
        '[ "$(hc_val cancel_sent)" = 1 ] && [ "$(hc_val result)" = "FATAL_ERROR:57014,NULL" ] && [ "$(hc_ms ready_ms)" -lt 3000 ]'
    check "held_c: the status unchanged ($(hc_val tx)); the next command runs ($(hc_val next); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val tx)" = IDLE ] && [ "$(hc_val next)" = TUPLES_OK:next ]'
    check "held_c: the cancelled statement never reached the server (probes: $(probes held_c)); nothing held or queued after" \
        '[ "$(probes held_c)" = 1 ] && [ "$(hc_card held_c queue)" = 0 ] && [ "$(hc_card held_c holders)" = 0 ]'
}

# c. the same with PQrequestCancel, from the event loop's own thread
it_held_request_cancel() {
    mark
    hc_hold held_rc held_rc 4000
    hc_run held_rc request_cancel DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_rc: PQrequestCancel 300 ms into the loop ended the hold before the holder's end ($(hc_val ready_ms) ms): 57014 then NULL ($(hc_val result))" \
        '[ "$(hc_val request_cancel)" = 1 ] && [ "$(hc_val result)" = "FATAL_ERROR:57014,NULL" ] && [ "$(hc_ms ready_ms)" -lt 3000 ]'
    check "held_rc: the next command runs ($(hc_val next); rc $rc); the cancelled one never reached the server (probes: $(probes held_rc))" \
        '[ $rc -eq 0 ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(probes held_rc)" = 1 ]'
}

# c. a drain: no grant for the held command (docs/operations.md), which waits until its timeout
it_held_drained() {
    mark
    hc_hold held_d held_d 3000
    hc_run held_d refuse DBTHROTTLE_WAIT_TIMEOUT=6s
    hc_line send
    "$top/build/dbthrottle" drain held_d >"$work/hc.drain.out" 2>&1
    drained=$?
    hc_line tx
    wait "$hc_holder"
    hc_sent_at_once
    check "held_d: drained while held (rc $drained): no grant when the holder ended; refused at the 6 s timeout ($(hc_val ready_ms) ms): 53300 then NULL ($(hc_val result))" \
        '[ $drained -eq 0 ] && [ "$(hc_val result)" = "FATAL_ERROR:53300,NULL" ] && [ "$(hc_ms ready_ms)" -ge 5500 ]'
    "$top/build/dbthrottle" resume held_d >/dev/null 2>&1
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_d: resumed, the connection runs the next command ($(hc_val next); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next)" = TUPLES_OK:next ]'
    check "held_d: the refused statement never reached the server (probes: $(probes held_d))" '[ "$(probes held_d)" = 1 ]'
}

# a blocking PQgetResult on a held command waits for it to be sent (or refused), then as usual
it_held_blocking_get_result() {
    mark
    hc_hold held_g held_g 3000
    hc_run held_g blocking DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_go next
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_g: PQgetResult blocked until the holder was done ($(hc_val blocked_ms) ms), then the result and NULL ($(hc_val result)); next: $(hc_val next) (rc $rc); probes $(probes held_g)" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ] && [ "$(hc_ms blocked_ms)" -ge 1000 ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(probes held_g)" = 2 ]'
    mark
    hc_hold held_g2 held_g2 6000
    hc_run held_g2 blocking DBTHROTTLE_WAIT_TIMEOUT=1500ms
    hc_line result
    wait "$hc_holder"
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_g2: refused at the 1.5 s timeout, PQgetResult returned then ($(hc_val blocked_ms) ms): 53300 and NULL ($(hc_val result)); next: $(hc_val next) (rc $rc); probes $(probes held_g2)" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = FATAL_ERROR:53300,NULL ] && [ "$(hc_ms blocked_ms)" -ge 1000 ] && [ "$(hc_ms blocked_ms)" -le 4500 ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(probes held_g2)" = 1 ]'
}

# a command in progress is in progress while held: libpq's own rule refuses a second one
it_held_second_send_refused() {
    mark
    hc_hold held_2s held_2s 3000
    hc_run held_2s double_send DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_2s: a second PQsendQuery while the first is held returns 0, another command in progress ($(hc_val second_send) $(grep -o 'second_error=.*' "$hc_out"))" \
        '[ "$(hc_val second_send)" = 0 ] && grep -q "^second_error=\"another command is already in progress" "$hc_out"'
    check "held_2s: the first completes ($(hc_val result)), the next runs ($(hc_val next); rc $rc); the second never reached the server (probes: $(probes held_2s))" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(probes held_2s)" = 2 ]'
}

# PQexec while a command is held: libpq reads the earlier command's results first (dropping them)
it_held_exec_after() {
    mark
    hc_hold held_x held_x 3000
    hc_run held_x exec_after DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_x: PQexec after a held PQsendQuery: its own result ($(hc_val exec)), not busy after ($(hc_val busy_end)); rc $rc" \
        '[ $rc -eq 0 ] && [ "$(hc_val exec)" = TUPLES_OK:exec ] && [ "$(hc_val busy_end)" = 0 ]'
    check "held_x: the held command ran once at the server, alone (probes: $(probes held_x); max at once $(max_conc held_x))" \
        '[ "$(probes held_x)" = 2 ] && [ "$(max_conc held_x)" = 1 ]'
}

# one thread, two connections, limit 1 (pgbench -j's shape; a deadlock when the send waited)
it_held_two_connections_one_loop() {
    mark
    hc_run held_two two DBTHROTTLE_WAIT_TIMEOUT=10s
    wait "$hc_pid"
    rc=$?
    check "held_two: the second connection's PQsendQuery returns 1 at once while the first holds the permit ($(hc_said))" \
        '[ "$(hc_val first_send)" = 1 ] && [ "$(hc_val second_send)" = 1 ] && [ "$(hc_ms second_send_ms)" -lt 1000 ] && [ "$(hc_val second_busy)" = 1 ]'
    check "held_two: both complete in the one loop, each alone at the server, the second after the first (rc $rc; probes $(probes held_two))" \
        '[ $rc -eq 0 ] && [ "$(hc_val first_result)" = TUPLES_OK:1,NULL ] && [ "$(hc_val second_result)" = TUPLES_OK:1,NULL ] && [ "$(hc_ms second_done_ms)" -ge "$(hc_ms first_done_ms)" ] && [ "$(probes held_two)" = 2 ]'
    hc_loop_ran
}

# the rest of the family: PQsendPrepare, PQsendQueryPrepared, PQsendDescribePrepared, each held
# behind a holder of its own
it_held_prepared() {
    for step in prepare query_prepared describe_prepared; do
        mark
        hc_hold held_s held_s 2500
        if [ $step = prepare ]; then hc_run held_s prepared DBTHROTTLE_WAIT_TIMEOUT=30s; else hc_go $step; fi
        hc_line ${step}_result
        wait "$hc_holder"
        case $step in
        query_prepared) want=TUPLES_OK:1,NULL ;; # the probe ran alone: after the holder's
        *) want=COMMAND_OK,NULL ;;
        esac
        check "held_s: PQsend_$step returns 1 at once, busy, nothing to flush; its result once the holder is done ($(grep "^${step}_" "$hc_out" | tr '\n' ' '))" \
            '[ "$(hc_val ${step}_send)" = 1 ] && [ "$(hc_ms ${step}_send_ms)" -lt 1000 ] && [ "$(hc_val ${step}_busy)" = 1 ] && [ "$(hc_val ${step}_flush)" = 0 ] && [ "$(hc_val ${step}_ready_ms)" -ge 1000 ] && [ "$(hc_val ${step}_result)" = "$want" ]'
    done
    wait "$hc_pid"
    rc=$?
    check "held_s: the program ends cleanly (rc $rc)" '[ $rc -eq 0 ]'
}

# d. pipeline mode: three commands and a sync, all held, sent in order once the holder is done
it_held_pipeline() {
    mark
    hc_hold held_p held_p 3000
    hc_run held_p pipeline DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line pipeline
    hc_go next
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    check "held_p: 3 PQsendQueryParams and PQpipelineSync return 1 at once ($(hc_said))" \
        '[ "$(hc_val batch_sent)" = 1 ] && [ "$(hc_ms send_ms)" -lt 1000 ] && [ "$(hc_val busy)" = 1 ] && [ "$(hc_val flush)" = 0 ]'
    hc_loop_ran
    check "held_p: then the results in order, each followed by NULL, then the sync" \
        '[ "$(hc_val batch_r1)" = TUPLES_OK:1,NULL ] && [ "$(hc_val batch_r2)" = TUPLES_OK:2,NULL ] && [ "$(hc_val batch_r3)" = TUPLES_OK:3,NULL ] && [ "$(hc_val batch_sync)" = PIPELINE_SYNC ]'
    check "held_p: the first ran at the server once, alone, after the holder (probes: $(probes held_p))" \
        '[ "$(probes held_p)" = 2 ]'
    check "held_p: the next batch and leaving pipeline mode work (rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next_r3)" = TUPLES_OK:3,NULL ] && [ "$(hc_val next_sync)" = PIPELINE_SYNC ] && [ "$(hc_val exit_pipeline)" = 1 ]'
}

# d. pipeline mode, refused at the timeout: 53300 first, then the others, then the sync
it_held_pipeline_refused() {
    mark
    hc_hold held_pr held_pr 6000
    hc_run held_pr pipeline DBTHROTTLE_WAIT_TIMEOUT=1500ms
    hc_line pipeline
    queue=$(hc_card held_pr queue)
    wait "$hc_holder"
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_pr: the pipeline's calls return 1 at once ($(hc_said))" \
        '[ "$(hc_val batch_sent)" = 1 ] && [ "$(hc_ms send_ms)" -lt 1000 ]'
    check "held_pr: refused at the timeout: 53300 first, the two others not run, each then NULL, then the sync" \
        '[ "$(hc_val batch_r1)" = FATAL_ERROR:53300,NULL ] && hc_not_run "$(hc_val batch_r2)" && hc_not_run "$(hc_val batch_r3)" && [ "$(hc_val batch_sync)" = PIPELINE_SYNC ]'
    check "held_pr: nothing queued after the refusal ($queue); none of it reached the server (probes: $(probes held_pr))" \
        '[ "$queue" = 0 ] && [ "$(probes held_pr)" = 1 ]'
    check "held_pr: the connection is usable after: the next batch runs (rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next_r1)" = TUPLES_OK:1,NULL ] && [ "$(hc_val next_r3)" = TUPLES_OK:3,NULL ] && [ "$(hc_val next_sync)" = PIPELINE_SYNC ]'
}

# e. PQfinish with a held command: withdrawn, never sent, no permit left behind
it_held_finish() {
    for hc_wrap in "" valgrind; do
        [ "$hc_wrap" = valgrind ] && ! command -v valgrind >/dev/null && continue
        pool=held_f${hc_wrap:+_vg}
        mark
        # valgrind takes seconds to start the program: the holder holds for longer there
        hc_hold $pool $pool $([ -n "$hc_wrap" ] && echo 10000 || echo 3000)
        HC_WRAP=${hc_wrap:+valgrind -q --error-exitcode=9 --log-file=$work/hc.valgrind.%p}
        hc_run $pool finish DBTHROTTLE_WAIT_TIMEOUT=30s
        HC_WRAP=
        hc_line finished
        [ -z "$hc_wrap" ] && hc_sent_at_once
        wait_until 10 '[ "$(hc_card $pool queue)" = 0 ]'
        check "$pool: PQfinish withdrew the held command from Redis' queue (queue: $(hc_card $pool queue))" \
            '[ "$(hc_card $pool queue)" = 0 ]'
        wait "$hc_holder"
        # the pool's permit is free once the holder is done: nothing of the finished connection has it
        after=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=$pool DBTHROTTLE_WAIT_TIMEOUT=5s \
            psql -qAtX -c "select 'free'" 2>&1)
        check "$pool: after the holder, the permit is free for another client ($after; holders $(hc_card $pool holders))" \
            '[ "$after" = free ] && [ "$(hc_card $pool holders)" = 0 ]'
        hc_go exit
        wait "$hc_pid"
        rc=$?
        check "$pool: the program lived on and ended cleanly${hc_wrap:+ under valgrind} (rc $rc; $(hc_said); $(cat "$work"/hc.valgrind.* 2>/dev/null | head -5))" \
            '[ $rc -eq 0 ] && [ "$(hc_val alive)" = 1 ]'
        check "$pool: the held command never reached the server (probes: $(probes $pool))" '[ "$(probes $pool)" = 1 ]'
    done
}

# e. PQreset with a held command: never sent; the connection works after the reset
it_held_reset() {
    mark
    hc_hold held_r held_r 3000
    hc_run held_r reset DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_r: PQreset with a held command: the connection works after it ($(hc_val reset_status), $(hc_val next); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val reset_status)" = OK ] && [ "$(hc_val next)" = TUPLES_OK:next ]'
    check "held_r: the held command never reached the server (probes: $(probes held_r)); nothing held or queued after" \
        '[ "$(probes held_r)" = 1 ] && [ "$(hc_card held_r queue)" = 0 ] && [ "$(hc_card held_r holders)" = 0 ]'
}

# f. fork with a held command: the child never sends it, the parent's completes
it_held_fork() {
    mark
    hc_hold held_k held_k 3000
    hc_run held_k fork DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_k: the parent's held command completes after the fork ($(hc_val result)), the child ran its own command and exits 0 ($(hc_val child_exit)), the next command runs (rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ] && [ "$(hc_val child_exit)" = 0 ] && [ "$(hc_val next)" = TUPLES_OK:next ]'
    check "held_k: at the server it ran once, not also from the child (probes: $(probes held_k), the holder's and the parent's)" \
        '[ "$(probes held_k)" = 2 ]'
}

# nonblocking mode (PQsetnonblocking 1): the same
it_held_nonblocking() {
    mark
    hc_hold held_nb held_nb 3000
    hc_run held_nb nonblocking DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_nb: in nonblocking mode, the result once the holder is done ($(hc_val ready_ms) ms: $(hc_val result)), still nonblocking (rc $rc; probes $(probes held_nb))" \
        '[ $rc -eq 0 ] && [ "$(hc_val nonblocking)" = 1 ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ] && [ "$(hc_ms ready_ms)" -ge 1000 ] && [ "$(hc_val still_nonblocking)" = 1 ] && [ "$(probes held_nb)" = 2 ]'
}

# a LISTENing connection gets its notifications while its command is held
it_held_notifications_while_held() {
    mark
    hc_run held_n notify DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line listen
    hc_hold held_n held_n 3000
    hc_go send
    hc_line send
    psql -qAtX -c "notify held_chan, 'while held'" >/dev/null
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_n: the NOTIFY reached the loop while the command was held ($(hc_val notifies) at $(hc_val first_notify_ms) ms; result at $(hc_val ready_ms) ms: $(hc_val result); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val listen)" = COMMAND_OK ] && [ "$(hc_ms notifies)" -ge 1 ] && [ "$(hc_ms first_notify_ms)" -ge 0 ] && [ "$(hc_ms first_notify_ms)" -lt "$(hc_ms ready_ms)" ] && [ "$(hc_val result)" = TUPLES_OK:1,NULL ]'
}

# PQfinish in pipeline mode with three held commands and a sync
it_held_pipeline_finish() {
    mark
    hc_hold held_pf held_pf 3000
    hc_run held_pf pipeline_finish DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line finished
    wait_until 10 '[ "$(hc_card held_pf queue)" = 0 ]'
    check "held_pf: PQfinish of a pipeline of held commands withdrew them ($(hc_said); queue $(hc_card held_pf queue))" \
        '[ "$(hc_val batch_sent)" = 1 ] && [ "$(hc_ms send_ms)" -lt 1000 ] && [ "$(hc_card held_pf queue)" = 0 ]'
    wait "$hc_holder"
    after=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=held_pf DBTHROTTLE_WAIT_TIMEOUT=5s psql -qAtX -c "select 'free'" 2>&1)
    hc_go exit
    wait "$hc_pid"
    rc=$?
    check "held_pf: the permit is free after the holder ($after), the program lives on (rc $rc), none reached the server (probes $(probes held_pf))" \
        '[ "$after" = free ] && [ $rc -eq 0 ] && [ "$(hc_val alive)" = 1 ] && [ "$(probes held_pf)" = 1 ]'
}

# the server ends the session of a connection whose command is held: the loop learns it at once
# (not at the grant), the place in the queue goes, and nothing is held or sent
it_held_backend_terminated() {
    mark
    hc_hold held_t held_t 4000
    hc_run held_t wait DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line send
    killed=$(psql -qAtX -c "select count(pg_terminate_backend(pid)) from pg_stat_activity where application_name = 'held_t' and state = 'idle'")
    hc_line conn
    wait_until 5 '[ "$(hc_card held_t queue)" = 0 ]'
    queue=$(hc_card held_t queue)
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    check "held_t: its backend terminated while held ($killed): the loop woke before the holder's end ($(hc_val ready_ms) ms), with the failure ($(hc_val result), consume_failed $(hc_val consume_failed), $(hc_val conn))" \
        '[ "$killed" = 1 ] && [ "$(hc_ms ready_ms)" -lt 3000 ] && [ "$(hc_val conn)" = BAD ] && { [ "$(hc_val consume_failed)" = 1 ] || [ "${hc_v=$(hc_val result)}" != "${hc_v#FATAL_ERROR}" ]; }'
    after=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=held_t DBTHROTTLE_WAIT_TIMEOUT=5s psql -qAtX -c "select 'free'" 2>&1)
    check "held_t: its place left the queue ($queue), the permit is free after the holder ($after), nothing reached the server (probes $(probes held_t); rc $rc)" \
        '[ "$queue" = 0 ] && [ "$after" = free ] && [ "$(probes held_t)" = 1 ]'
}

# 8 connections in one loop at a limit of 2, 3 probes each, each sent once the connection's last
# result is read: none waits in the call, the loop never stalls, the limit holds at the server
it_held_many_connections_one_loop() {
    mark
    hc_run held_many many DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=20s HELD_SQL="select dbt_probe(50)"
    wait "$hc_pid"
    rc=$?
    check "held_many: 8 connections x 3 commands in one loop at limit 2: all ran, no send waited, no stall ($(hc_said); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val many_ok)" = 24 ] && [ "$(hc_val many_bad)" = 0 ] && [ "$(hc_ms longest_send_ms)" -lt 500 ] && [ "$(hc_ms maxgap_ms)" -lt 500 ]'
    check "held_many: at the server 24 probes, never more than 2 at once, the limit reached (saw $(max_conc held_many) at once, $(probes held_many) probes)" \
        '[ "$(probes held_many)" = 24 ] && [ "$(max_conc held_many)" = 2 ]'
}

# PQfinish, PQreset and PQcancel racing the grant of the held command (60 rounds each; a thread of
# the program reads the holder's result, which frees the permit, while the main thread ends the
# held command 0-20 ms later), and PQfinish's race again under valgrind: no crash, no hang,
# every round accounted for, nothing held or queued in Redis afterwards
it_held_races_with_the_grant() {
    for how in finish reset cancel valgrind; do
        pool=held_race_$how
        rounds=60
        [ $how = valgrind ] && ! command -v valgrind >/dev/null && continue
        [ $how = valgrind ] && rounds=15
        HC_WRAP=
        [ $how = valgrind ] && HC_WRAP="valgrind -q --error-exitcode=9 --log-file=$work/hc.race.valgrind.%p"
        race=$how
        [ $how = valgrind ] && race=finish
        hc_run $pool race HELD_RACE=$race HELD_ROUNDS=$rounds DBTHROTTLE_WAIT_TIMEOUT=20s
        HC_WRAP=
        wait "$hc_pid"
        rc=$?
        wait_until 10 '[ "$(hc_card $pool holders)" = 0 ] && [ "$(hc_card $pool queue)" = 0 ]'
        case $how in
        finish | valgrind) outcome='true' ;;
        reset) outcome='[ "$(hc_val next_ok)" = $rounds ]' ;;
        cancel) outcome='[ "$(hc_val next_ok)" = $rounds ] && [ "$(hc_val other)" = 0 ] && [ $(($(hc_val ran) + $(hc_val cancelled))) = $rounds ]' ;;
        esac
        check "$pool: $rounds rounds, no crash or hang (rc $rc; $(hc_said); $(cat "$work"/hc.race.valgrind.* 2>/dev/null | head -5)), nothing held or queued after (holders $(hc_card $pool holders), queue $(hc_card $pool queue))" \
            '[ $rc -eq 0 ] && [ "$(hc_val rounds)" = $rounds ] && '"$outcome"' && [ "$(hc_card $pool holders)" = 0 ] && [ "$(hc_card $pool queue)" = 0 ]'
    done
}

# review findings: PQsetSingleRowMode on a held command (psycopg 3's stream()), a notice processor
# that asks libpq about its connection while the library reads it, and a pipeline whose refused
# stand-in is answered as aborted
it_held_single_row_mode() {
    mark
    hc_hold held_sr held_sr 3000
    hc_run held_sr single_row DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    hc_sent_at_once
    check "held_sr: PQsetSingleRowMode asked while held returns 1 ($(hc_val single_row)) and the rows come one by one ($(hc_val rows); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val single_row)" = 1 ] && [ "$(hc_val rows)" = SINGLE_TUPLE,SINGLE_TUPLE,SINGLE_TUPLE,TUPLES_OK:,NULL ]'
}

it_held_notice_processor_asks_libpq() {
    mark
    hc_hold held_np held_np 2000
    hc_run held_np notice DBTHROTTLE_WAIT_TIMEOUT=30s
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    check "held_np: a notice processor asking libpq about its connection during a held command's read does not hang it (rc $rc; $(hc_said))" \
        '[ $rc -eq 0 ] && [ "$(hc_val notices)" = 1 ] && [ "$(hc_val result)" = COMMAND_OK,NULL ] && [ "$(hc_val second)" = TUPLES_OK:1,NULL ] && [ "$(probes held_np)" = 3 ]'
}

it_held_pipeline_abort_then_more() {
    mark
    hc_hold held_pa held_pa 2000
    hc_run held_pa pipeline_abort DBTHROTTLE_WAIT_TIMEOUT=30s
    hc_line exit
    wait "$hc_holder"
    mark
    hc_hold held_pa held_pa 2000
    hc_go again
    wait "$hc_pid"
    rc=$?
    wait "$hc_holder"
    check "held_pa: a held pipeline's error and the command libpq refused once sent read as the server's error then aborted ($(hc_val r1) $(hc_val r2) $(hc_val sync)), pipeline left ($(hc_val exit))" \
        '[ "$(hc_val r1)" = FATAL_ERROR:22012,NULL ] && [ "$(hc_val exit)" = 1 ]'
    check "held_pa: afterwards a held command (sent in $(hc_val again_send_ms) ms, busy $(hc_val again_busy): $(hc_val again)) and the next ($(hc_val next_send) $(hc_val next)) run (rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val again_busy)" = 1 ] && [ "$(hc_val again)" = TUPLES_OK:1,NULL ] && [ "$(hc_val next_send)" = 1 ] && [ "$(hc_val next)" = TUPLES_OK:next,NULL ]'
}

# ---- classes and weights (issue 17): ids, units and refusals, read from Redis and the server ----
cls_ids() { rcli zrange "dbthrottle:{$1}:q:holders" 0 -1 | tr '\n' ' '; } # cls_ids POOL: held members
cls_bg() { # cls_bg SQL ENV=VALUE...: a throttled psql in the background, its pid in $cls_pids
    cls_sql=$1
    shift
    throttled "$@" psql -qAt -c "$cls_sql" >/dev/null 2>&1 &
    echo $! >>"$work/pids"
    cls_pids="$cls_pids $!"
}

# the class of each connection (rules, decided once; or the process' DBTHROTTLE_CLASS) is named in
# the permit ids Redis holds; a process with no class setting keeps the 3-part id
it_class_ids_name_the_class() {
    cls_pids=
    rules='interactive:application_name=web*;batch:user=nobody'
    cls_bg "select pg_sleep(2)" DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_POOL=cls_ids DBTHROTTLE_CLASS_RULES="$rules" PGAPPNAME=web-1
    cls_bg "select pg_sleep(2)" DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_POOL=cls_ids DBTHROTTLE_CLASS_RULES="$rules" PGAPPNAME=other
    cls_bg "select pg_sleep(2)" DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_POOL=cls_ids DBTHROTTLE_CLASS=batch
    cls_bg "select pg_sleep(2)" DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_POOL=cls_ids
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_ids}:q:holders")" -ge 4 ]'
    ids=$(cls_ids cls_ids)
    running=$(psql -qAt -c "select count(*) from pg_stat_activity where query = 'select pg_sleep(2)' and state = 'active'")
    check "4 statements run at the server ($running) and Redis holds 4 permits: $ids" \
        '[ "$running" -eq 4 ] && [ "$(echo $ids | wc -w)" -eq 4 ]'
    check "application_name=web-1 matched the interactive rule: <cid>.<serial>.interactive.1.8" \
        'echo "$ids" | grep -Eq "(^| )([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.interactive\.1\.8( |$)"'
    check "a connection no rule matches is in the default class: <cid>.<serial>.-.1.8" \
        'echo "$ids" | grep -Eq "(^| )([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.-\.1\.8( |$)"'
    check "DBTHROTTLE_CLASS=batch: <cid>.<serial>.batch.1.8" \
        'echo "$ids" | grep -Eq "(^| )([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.batch\.1\.8( |$)"'
    check "no class setting: the 3-part id <cid>.<serial>.8, as before classes" \
        'echo "$ids" | grep -Eq "(^| )([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.8( |$)"'
    wait $cls_pids
}

# a weight-3 command takes 3 of the limit's 4 units: Redis holds id, id#2 and id#3, and two heavy
# statements never run at once at the server (sampled in pg_stat_activity) while a light one runs
# beside a heavy one
it_weights_take_units_at_the_server() {
    cls_pids=
    weights='3:sql=^\s*select pg_sleep\(0\.8\) /\* heavy \*/'
    rm -f "$work/heavy.stop"
    ( max=0 light=0
      while [ ! -e "$work/heavy.stop" ]; do
          set -- $(psql -qAt -F ' ' -c "select count(*) filter (where query like '%/* heavy */'), count(*) filter (where query like '%/* light */') from pg_stat_activity where state = 'active' and pid <> pg_backend_pid()")
          [ "$1" -gt "$max" ] && max=$1
          [ "$1" -ge 1 ] && [ "$2" -ge 1 ] && light=1
          echo "$max $light" >"$work/heavy.max"
      done ) &
    sampler=$!
    echo $sampler >>"$work/pids"
    t0=$(date +%s%N)
    for i in 1 2 3; do
        cls_bg "select pg_sleep(0.8) /* heavy */" DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_w DBTHROTTLE_WEIGHTS="$weights"
    done
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_w}:q:holders")" -ge 3 ]'
    ids=$(cls_ids cls_w)
    cls_bg "select pg_sleep(0.3) /* light */" DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_w DBTHROTTLE_WEIGHTS="$weights"
    wait $cls_pids
    t1=$(date +%s%N)
    touch "$work/heavy.stop"
    wait $sampler
    read max light <"$work/heavy.max"
    check "a heavy one holds 3 units in Redis: <cid>.<serial>.-.3.4, its #2 and #3 ($ids)" \
        'id=$(echo "$ids" | grep -Eo "([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.-\.3\.4( |$)" | head -1 | tr -d " ") && [ -n "$id" ] && echo " $ids " | grep -q " $id#2 " && echo " $ids " | grep -q " $id#3 "'
    check "at most one of 3 heavy statements ran at once at the server (saw $max)" '[ "$max" -eq 1 ]'
    check "a light one ran beside a heavy one (1 + 3 units = the limit 4)" '[ "$light" -eq 1 ]'
    check "the 3 heavy ones ran one after another: $(( (t1 - t0) / 1000000 )) ms >= 2400" \
        '[ $(( (t1 - t0) / 1000000 )) -ge 2400 ]'
}

# a statement run by name (psycopg 3's prepare=True: PQsendPrepare, then PQsendQueryPrepared) is
# weighed by the text it was prepared with
it_prepared_weighed_by_its_text() {
    rm -f "$work/prepared.ids"
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_p DBTHROTTLE_WEIGHTS='2:sql=/\* heavy \*/' \
        $py -c "
import psycopg, subprocess, threading
c = psycopg.connect('', autocommit=True)
c.execute('select 1 /* heavy */', prepare=True)  # prepared: the next runs by name
def look():
    import time
    time.sleep(0.4)
    out = subprocess.run(['redis-cli', '-p', '$rport', 'zrange', 'dbthrottle:{cls_p}:q:holders', '0', '-1'], capture_output=True, text=True).stdout
    open('$work/prepared.ids', 'w').write(out.replace(chr(10), ' '))
t = threading.Thread(target=look)
t.start()
c.execute('select pg_sleep(1) /* heavy */', prepare=True)
c.execute('select pg_sleep(1) /* heavy */', prepare=True)
t.join()
" >"$work/prepared.out" 2>&1
    rc=$?
    ids=$(cat "$work/prepared.ids" 2>/dev/null)
    check "psycopg 3 prepare=True ran (rc $rc: $(head -c 200 "$work/prepared.out"))" [ $rc -eq 0 ]
    check "the prepared statement run by name holds 2 units: <cid>.<serial>.-.2.4 and its #2 ($ids)" \
        'echo "$ids" | grep -Eq "[0-9a-f]{16}\.[0-9]+\.-\.2\.4 " && echo "$ids" | grep -Eq "[0-9a-f]{16}\.[0-9]+\.-\.2\.4#2"'
}

# a class with a queue cap of 0 never queues: its command is refused at once, with 53300 and a
# message naming the class and its cap, and never reaches the server
it_class_queue_cap_refuses_at_once() {
    cls_pids=
    classes='interactive=50%;batch=50%,queue_cap=0'
    cls_bg "select pg_sleep(2)" DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_cap DBTHROTTLE_CLASSES="$classes" DBTHROTTLE_CLASS=batch
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_cap}:q:holders")" -ge 1 ]'
    t0=$(date +%s%N)
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_cap DBTHROTTLE_CLASSES="$classes" \
        DBTHROTTLE_CLASS=batch DBTHROTTLE_WAIT_TIMEOUT=1m DBTHROTTLE_LOG_LEVEL=error $py -c "
import psycopg2, sys
c = psycopg2.connect('')
c.autocommit = True
cur = c.cursor()
try:
    cur.execute(\"select 'capped ran'\")
    print(cur.fetchone()[0])
except psycopg2.OperationalError as e:
    sys.stderr.write('%s %s' % (e.pgcode, e))
    sys.exit(1)" >"$work/cap.out" 2>"$work/cap.err"
    rc=$?
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    check "refused (rc $rc) in $ms ms, not after DBTHROTTLE_WAIT_TIMEOUT=1m" '[ $rc -ne 0 ] && [ $ms -lt 5000 ]'
    check "the message names the class and its cap, SQLSTATE 53300: $(head -c 300 "$work/cap.err")" \
        'grep -q "^53300 dbthrottle: no query permit" "$work/cap.err" && grep -q "class \"batch\" has its queue cap of 0 waiters" "$work/cap.err"'
    check "nothing reached the server" [ ! -s "$work/cap.out" ]
    wait $cls_pids
}

# a class's wait (from the definitions) replaces DBTHROTTLE_WAIT_TIMEOUT for its commands
it_class_wait_replaces_wait_timeout() {
    cls_pids=
    classes='interactive=50%;batch=50%,wait=300ms'
    cls_bg "select pg_sleep(3)" DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_wait DBTHROTTLE_CLASSES="$classes" DBTHROTTLE_CLASS=interactive
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_wait}:q:holders")" -ge 1 ]'
    t0=$(date +%s%N)
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_wait DBTHROTTLE_CLASSES="$classes" \
        DBTHROTTLE_CLASS=batch DBTHROTTLE_WAIT_TIMEOUT=1m \
        psql -qAt -c "select 'waited ran'" >"$work/cwait.out" 2>"$work/cwait.err"
    rc=$?
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    check "batch's wait=300ms, not WAIT_TIMEOUT=1m: refused (rc $rc) after $ms ms (250 .. 2500)" \
        '[ $rc -ne 0 ] && [ $ms -ge 250 ] && [ $ms -lt 2500 ] && grep -q "no query permit" "$work/cwait.err"'
    check "nothing reached the server" [ ! -s "$work/cwait.out" ]
    wait $cls_pids
}

# a kept permit (DBTHROTTLE_CACHE_PERMITS) serves a next command of its own weight only: another
# weight takes a permit of its own through Redis (its grants counter)
it_kept_permit_serves_its_weight_only() {
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_k DBTHROTTLE_CACHE_PERMITS=on \
        DBTHROTTLE_CACHE_IDLE=1m DBTHROTTLE_WEIGHTS='2:sql=/\* heavy \*/' \
        psql -qAt -c "select 1" -c "select 2" -c "select 3 /* heavy */" -c "select 4 /* heavy */" \
        >"$work/kept.out" 2>&1
    rc=$?
    grants=$(rcli hget "dbthrottle:{cls_k}:q:stats" grants)
    check "4 commands ran (rc $rc: $(tr '\n' ' ' <"$work/kept.out"))" '[ $rc -eq 0 ] && [ "$(wc -l <"$work/kept.out")" -eq 4 ]'
    check "2 grants in Redis (saw $grants): one light, kept for the next light; one heavy, kept for the next heavy" \
        '[ "$grants" = 2 ]'
}

# a statement prepared in a pipeline behind a held command (PQsendPrepare queued behind it, not
# sent through the permit path) is weighed by its text when it later runs by name
it_prepared_behind_a_held_command_weighed_by_its_text() {
    cls_pids=
    rm -f "$work/hprep.ids"
    weights='4:sql=/\* full \*/;2:sql=/\* heavy \*/'
    cls_bg "select pg_sleep(1.5) /* full */" DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_hp DBTHROTTLE_WEIGHTS="$weights"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_hp}:q:holders")" -ge 4 ]'
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_hp DBTHROTTLE_WEIGHTS="$weights" \
        DBTHROTTLE_WAIT_TIMEOUT=30s $py -c "
import psycopg, subprocess, threading, time
c = psycopg.connect('', autocommit=True)
with c.pipeline():
    c.execute('select 1')  # held: the pool is full
    c.execute('select pg_sleep(1) /* heavy */', prepare=True)  # its PQsendPrepare queued behind
def look():
    time.sleep(0.4)
    out = subprocess.run(['redis-cli', '-p', '$rport', 'zrange', 'dbthrottle:{cls_hp}:q:holders', '0', '-1'], capture_output=True, text=True).stdout
    open('$work/hprep.ids', 'w').write(out.replace(chr(10), ' '))
t = threading.Thread(target=look)
t.start()
c.execute('select pg_sleep(1) /* heavy */', prepare=True)  # by name now
t.join()
" >"$work/hprep.out" 2>&1
    rc=$?
    wait $cls_pids
    ids=$(cat "$work/hprep.ids" 2>/dev/null)
    check "psycopg 3 pipeline with prepare=True ran (rc $rc: $(head -c 200 "$work/hprep.out"))" [ $rc -eq 0 ]
    check "the statement prepared behind a held command, run by name, holds 2 units ($ids)" \
        'echo "$ids" | grep -Eq "[0-9a-f]{16}\.[0-9]+\.-\.2\.4#2"'
}

# a wait the class's wait ended says so in the refusal (not DBTHROTTLE_WAIT_TIMEOUT, which the
# operator would raise in vain)
it_class_wait_refusal_names_the_class_wait() {
    cls_pids=
    classes='interactive=50%;batch=50%,wait=300ms'
    cls_bg "select pg_sleep(3)" DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_wmsg DBTHROTTLE_CLASSES="$classes" DBTHROTTLE_CLASS=interactive
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_wmsg}:q:holders")" -ge 1 ]'
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_wmsg DBTHROTTLE_CLASSES="$classes" \
        DBTHROTTLE_CLASS=batch DBTHROTTLE_WAIT_TIMEOUT=1m DBTHROTTLE_LOG_LEVEL=error \
        psql -qAt -c "select 'waited ran'" >"$work/cwmsg.out" 2>"$work/cwmsg.err"
    rc=$?
    check "refused by the class's wait, and the message says so ($(tr '\n' ' ' <"$work/cwmsg.err"))" \
        '[ $rc -ne 0 ] && grep -q "wait of class \"batch\" (300 ms)" "$work/cwmsg.err" && ! grep -q DBTHROTTLE_WAIT_TIMEOUT "$work/cwmsg.err"'
    wait $cls_pids
}

# ---- issue 18: the holders' sessions ---------------------------------------------------------------

# field N (1-based) of the \x1f-separated info of the pool's one query holder
sess_field() { rcli --raw hvals "dbthrottle:{$1}:q:info" | head -n 1 | tr '\037' '\n' | sed -n "$2p"; }

# A holder's entry in Redis names the backend pid, application_name, user and database of its
# session (so it joins with pg_stat_activity), and its state follows it into a transaction.
it_holders_show_their_session() {
    rm -f "$work/sess.pid"
    ( echo "select pg_backend_pid();"; echo "begin;"; echo "select 1;"; sleep 4; echo "commit;" ) |
        PGAPPNAME='app with spaces' throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_POOL=sess \
            DBTHROTTLE_LEASE=900ms psql -qAt >"$work/sess.out" 2>&1 &
    sess_bg=$!
    echo $sess_bg >>"$work/pids"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{sess}:q:holders")" = 1 ] && [ -s "$work/sess.out" ]'
    # the client's own pg_backend_pid(), pg_stat_activity's row for that application_name, and Redis'
    mine=$(head -n 1 "$work/sess.out")
    activity=$(psql -qAt -c "select pid || '/' || usename || '/' || datname from pg_stat_activity where application_name = 'app with spaces'")
    check "Redis names the holder's backend pid ($(sess_field sess 4)), the one pg_backend_pid() said ($mine)" \
        '[ -n "$mine" ] && [ "$(sess_field sess 4)" = "$mine" ]'
    check "it joins with pg_stat_activity by pid, application_name, user and database ($activity)" \
        '[ "$(sess_field sess 4)/$(sess_field sess 6)/$(sess_field sess 7)" = "$activity" ] && [ "$(sess_field sess 5)" = "app with spaces" ]'
    # idle in its transaction: the process' renewal (every lease/3) says so
    wait_until 10 '[ "$(sess_field sess 2)" = idle_tx ]'
    check "the state of a permit idle in a transaction is idle_tx ($(sess_field sess 2))" \
        '[ "$(sess_field sess 2)" = idle_tx ]'
    wait $sess_bg
}

run_case() {
    echo "# $1"
    "it_$1"
}
run_picked
summary
