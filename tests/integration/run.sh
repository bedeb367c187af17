#!/bin/sh
# run.sh [CASE...] - the integration suite: libdbthrottle.so preloaded into unmodified libpq
# programs (psql, pgbench, client libraries), against a redis-server and a PostgreSQL this script
# starts on free loopback ports and stops. Each case is a file here named for the behaviour it
# tests, defining the function it_NAME; with no names all run, in the order of $cases (make
# test-integration T=pgbench_modes runs one). The helpers several cases share are below (the held
# commands' hc_*, the classes' cls_*). Prints one line per check and "N passed, N failed" at the
# end; exits non-zero on a failure.
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
    held_single_row_mode held_notice_processor_asks_libpq held_pipeline_abort_then_more
    held_sent_by_the_releasing_thread"
cases="$cases class_ids_name_the_class weights_take_units_at_the_server prepared_weighed_by_its_text prepared_behind_a_held_command_weighed_by_its_text
    class_queue_cap_refuses_at_once class_wait_replaces_wait_timeout kept_permit_serves_its_weight_only
    class_wait_refusal_names_the_class_wait"
cases="$cases holders_show_their_session kept_on_the_host delay_proxy_adds_its_delay"
cases="$cases held_threads_pass_permits kept_permit_gone_leaves_the_shelf exempt_matches_what_the_client_sent
    status_true_under_host_sharing status_processes_count_what_redis_holds status_names_disagreeing_limits
    holders_state_shown_once_it_lasts clients_lists_every_connection live_wait_timeout live_log_level live_exempt live_classes_and_weights
    connect_loads_only_missing_scripts shadow_report_predicts"
# A case file missing from the order would silently never run; a case without its file would
# fail only when reached.
for f in "$here"/*.sh; do
    n=$(basename "$f" .sh)
    [ "$n" = run ] || is_case "$n" || { echo "$f is not in run.sh's cases" >&2; exit 2; }
done
for n in $cases; do
    [ -f "$here/$n.sh" ] || { echo "run.sh's case $n has no file $here/$n.sh" >&2; exit 2; }
done
pick_cases "$@"
# DBT_INTEGRATION_SKIP="a b": every picked case but those (make check leaves the slowest to make
# test, which runs them all).
skip_cases DBT_INTEGRATION_SKIP ${DBT_INTEGRATION_SKIP:-}
harness_begin it
[ -z "${DBT_INTEGRATION_SKIP:-}" ] || info "left out (DBT_INTEGRATION_SKIP; make test runs them): $DBT_INTEGRATION_SKIP"

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
# it pass step STEP. $HC_WRAP runs it under a tool (valgrind; see hc_valgrind).
# DBT_HELD_CLIENT and DBT_HELD_LIB: another build of held_client and the library preloaded into it
# alone (make check-tsan: both built with ThreadSanitizer, whose runtime only a program built with
# it has: timeout, and every other throttled program of the cases, keep $DBT_LIB).
hc_client=$top/build/tests/held_client
[ -z "${DBT_HELD_CLIENT:-}" ] || hc_client="env LD_PRELOAD=$DBT_HELD_LIB $DBT_HELD_CLIENT"
hc_run() {
    hc_pool=$1
    hc_mode=$2
    shift 2
    hc_out=$work/hc.$hc_pool.out
    rm -f "$hc_out" "$work/hc.$hc_pool.go".*
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=$hc_pool PGAPPNAME=$hc_pool \
        HELD_GO=$work/hc.$hc_pool.go "$@" timeout 120 ${HC_WRAP:-} $hc_client \
        "$hc_mode" >"$hc_out" 2>"$work/hc.$hc_pool.err" &
    hc_pid=$!
    echo "$hc_pid" >>"$work/pids"
}
hc_go() { touch "$work/hc.$hc_pool.go.$1"; }
# hc_valgrind: whether the cases' runs of held_client under valgrind can be made (valgrind
# installed, and held_client not a sanitizer's build, which valgrind cannot run).
hc_valgrind() { [ -z "${DBT_HELD_CLIENT:-}" ] && command -v valgrind >/dev/null; }
# hc_line KEY: until held_client said KEY (a field anywhere in its lines, as hc_val reads it: "conn"
# comes after "tx" on its line, and a wait for it at a line's start ran out its whole 60 s)
hc_line() { wait_until 60 "grep -qE '(^| )$1=' \"\$hc_out\" 2>/dev/null"; }
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

# ---- classes and weights (issue 17): ids, units and refusals, read from Redis and the server ----
cls_ids() { rcli zrange "dbthrottle:{$1}:q:holders" 0 -1 | tr '\n' ' '; } # cls_ids POOL: held members
# live_version POOL: the version of the pool's live settings Redis holds (0: no key), as the
# workers compare it; live_applied POOL: the versions the pool's psql processes applied, by their
# records in Redis (status --json; one line once they all did).
live_version() { lv_=$(rcli --raw get "dbthrottle:{$1}:settings" | sed -n '1s/^v\([0-9]*\)$/\1/p'); echo "${lv_:-0}"; }
live_applied() {
    "$top/build/dbthrottle" status "$1" --json --redis "redis://127.0.0.1:$rport" | $py -c 'import json, sys
for p in json.load(sys.stdin)["processes"]:
    if p["program"] == "psql": print(p["live_settings_applied"][0])' 2>/dev/null | sort -u
}
# hold_begin NAME ENV=VALUE...: a throttled psql (application_name NAME) that takes a permit and
# keeps it until hold_end NAME cancels its statement: a check whose premise is "the permit is
# still held" does not depend on how long the machine takes to get there (a 4 s pg_sleep ran out
# under make test's load: exempt_connections). Its pid in $hold_pid.
hold_begin() {
    hold_name=$1
    shift
    throttled "$@" PGAPPNAME="$hold_name" psql -qAt -c "select pg_sleep(120)" >/dev/null 2>&1 &
    hold_pid=$!
    hold_pids="${hold_pids:-} $hold_pid"
    echo "$hold_pid" >>"$work/pids"
}
hold_end() { # hold_end NAME: cancels NAME's statement (its permit goes back) and waits for it
    # (again until it has ended: a cancel that came before the statement started does nothing)
    wait_until 20 'psql -qAtX -c "select pg_cancel_backend(pid) from pg_stat_activity where application_name = '"'$1'"'" >/dev/null
        ! kill -0 "$hold_pid" 2>/dev/null'
    wait "$hold_pid" 2>/dev/null
}
holds_ended() { for hp in $hold_pids; do ! kill -0 "$hp" 2>/dev/null || return 1; done; }
hold_end_all() { # hold_end_all: hold_end for every hold begun (and not ended) since the last call
    wait_until 20 'psql -qAtX -c "select pg_cancel_backend(pid) from pg_stat_activity where query = '"'select pg_sleep(120)'"'" >/dev/null
        holds_ended'
    for hp in $hold_pids; do wait "$hp" 2>/dev/null; done
    hold_pids=
}

cls_bg() { # cls_bg SQL ENV=VALUE...: a throttled psql in the background, its pid in $cls_pids
    cls_sql=$1
    shift
    throttled "$@" psql -qAt -c "$cls_sql" >/dev/null 2>&1 &
    echo $! >>"$work/pids"
    cls_pids="$cls_pids $!"
}

# ---- issue 18: the holders' sessions ---------------------------------------------------------------

# field N (1-based) of the \x1f-separated info of the pool's one query holder
sess_field() { rcli --raw hvals "dbthrottle:{$1}:q:info" | head -n 1 | tr '\037' '\n' | sed -n "$2p"; }

run_case() {
    echo "# $1"
    . "$here/$1.sh"
    "it_$1"
}
run_picked
no_sanitizer_report
summary
