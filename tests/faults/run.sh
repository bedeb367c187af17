#!/bin/sh
# run.sh [CASE...] - the fault suite: libdbthrottle.so preloaded into real libpq workers, against a
# redis-server and a PostgreSQL this script starts (and stops) on free loopback ports, while the
# test kills, stops, stalls and cuts things. Each case is a file here named for what it tests
# (make test-faults T=holders_killed_or_stopped runs one); with no names all run, in the order
# below. Each case prints what it checked; the last line is "N passed, N failed" and the exit
# status is non-zero on a failure.
# With classes (make test-faults-classes): DBTHROTTLE_CLASSES, exported, ships a definition from
# every process, and DBT_FAULTS_CLASSES="A B ..." gives the workers spawned here those classes in
# turn (DBTHROTTLE_CLASS; a case's own setting wins); processes started otherwise (throttled, the
# command) stay untagged: the pool's default class. Every bound the cases check must hold so.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
cases="holders_killed_or_stopped redis_restarts_and_stalls query_longer_than_lease
    lease_lost_while_redis_away cancel_ends_wait fork_and_threads clients_that_disagree
    host_cut_off secrets_stay_hidden threads_share_a_pool misconfigured_redis bad_settings
    fleet_state_visible waits_on_own_sessions
    recovers_after_fault sessions_that_end forks_while_waiting cancels_reach_waits
    evictions_reach_holders async_clients held_commands restart_empty_admits_no_one_extra
    sentinel_failover failover_admits_no_one_extra redis_over_tls redis_cluster
    logs_operators_expect kept_permits_yield_to_operator hosts_share_permits share_segment_damaged
    processes_share_a_host namespaces_share_no_segment cleanup_kills_only_its_own
    share_dir_unusable paused_workers_cost_only_themselves releases_outlive_a_stall
    other_users_cannot_stall_sharing orphans_end_with_their_client stall_outlives_the_keys
    lapse_cancels_the_command first_waiter_behind_kept exits_while_redis_stalls
    stopped_keeper_admits_no_one_extra listener_dropped_is_no_outage host_relay live_outage_mode live_lease
    hosts_pass_within_their_shares one_over_the_limit shadow_mode"
# A case file missing from the order would silently never run.
for f in "$here"/*.sh; do
    n=$(basename "$f" .sh)
    [ "$n" = run ] || is_case "$n" || { echo "$f is not in run.sh's cases" >&2; exit 2; }
done
pick_cases "$@"
# DBT_FAULTS_SKIP="a b": every picked case but those (make test's second and third passes leave
# out the cases that caching or classes cannot change, to keep CI within its time).
skip_cases DBT_FAULTS_SKIP ${DBT_FAULTS_SKIP:-}
harness_begin faults
[ -z "${DBT_FAULTS_SKIP:-}" ] || info "left out (DBT_FAULTS_SKIP): $DBT_FAULTS_SKIP"
[ -z "${FA_ONLY:-}" ] || info "failover_admits_no_one_extra runs only FA_ONLY=$FA_ONLY"
suite_cleanup() { command -v netns_cleanup >/dev/null && netns_cleanup; }

export DBTHROTTLE_LOG_LEVEL=${DBT_FAULTS_LOG_LEVEL:-warn}
[ -n "${DBTHROTTLE_CLASSES:-}" ] && info "classes: DBTHROTTLE_CLASSES=$DBTHROTTLE_CLASSES; workers in turn: ${DBT_FAULTS_CLASSES:-(untagged)}"
redis_start
pg_start
counter_install

# spawn OUT ENV... : starts a worker in the background with the preload; its pid in $spawned.
spawn() {
    out=$1
    shift
    env LD_PRELOAD="$preload" $(next_class) "$@" ${DBT_WRAP:-} "$worker" ${wargs:-} >"$out" 2>>"$work/workers.err" &
    spawned=$!
    spawns=$((spawns + 1))
    spawned_list="${spawned_list:-} $spawned"
    echo "$spawned" >>"$work/pids"
}
# next_class: DBTHROTTLE_CLASS=<the next of $DBT_FAULTS_CLASSES, in turn>, or nothing.
spawns=0
next_class() {
    [ -n "${DBT_FAULTS_CLASSES:-}" ] || return 0
    set -- $DBT_FAULTS_CLASSES
    shift $((spawns % $#))
    echo "DBTHROTTLE_CLASS=$1"
}
# wait_workers: waits for every worker spawned since the last call (not for the servers).
wait_workers() {
    for p in ${spawned_list:-}; do wait "$p"; done
    spawned_list=
}
# wait_workers_counted: as wait_workers, and counts the workers that exited badly in $bad_exits,
# each said in $bad_how ("; pid P exit S (signal N)": a status over 128 is a signal's), with the
# last lines each wrote to workers.err (a fault's report is there too: summary lists it).
wait_workers_counted() {
    bad_exits=0 bad_how=
    for p in ${spawned_list:-}; do
        wait "$p" && continue
        wwc_st=$?
        bad_exits=$((bad_exits + 1))
        bad_how="$bad_how; pid $p exit $wwc_st$([ $wwc_st -gt 128 ] && echo " (signal $((wwc_st - 128)))")"
        grep "pid=$p " "$work/workers.err" | tail -3 | sed 's/^/# worker: /'
    done
    spawned_list=
}
# sum_field / max_field FIELD FILES...: the sum (the largest) of FIELD=N over the workers'
# summary lines.
sum_field() {
    f=$1
    shift
    cat "$@" 2>/dev/null | tr ' ' '\n' | awk -F= -v f="$f" '$1 == f { s += $2 } END { print s + 0 }'
}
max_field() {
    f=$1
    shift
    cat "$@" 2>/dev/null | tr ' ' '\n' | awk -F= -v f="$f" '$1 == f && $2 + 0 > m { m = $2 + 0 } END { print m + 0 }'
}

# Host sharing (issue 19), for the cases that test it: share_dir_known is true when the library
# knows DBTHROTTLE_SHARE_DIR (an unknown DBTHROTTLE_* name is a configuration error, so the cases
# set it only then); library_shares when code outside hostshare.c calls dbt_share_attach (by the
# library's disassembly and line table: the segment is used, not merely compiled in), so that
# the cases can assert that the segment files exist rather than trust the library to say so.
share_dir_known() { grep -q DBTHROTTLE_SHARE_DIR "$lib"; }
library_shares() {
    objdump -d -l --no-show-raw-insn "$lib" 2>/dev/null | awk '
        /\.c:[0-9]+/ { src = $1 }
        /(call|jmp).*<dbt_share_attach(@plt)?>/ && src !~ /hostshare\.c/ { found = 1 }
        END { exit !found }'
}

# With classes, how many semaphores on the suite's own Redis carried the workers' shipped
# definitions right after each case (read then: keys expire, and cases restart Redis empty).
shipped=0
run_case() {
    spawned_list=
    . "$here/$1.sh"
    [ -z "${DBTHROTTLE_CLASSES:-}" ] || shipped=$((shipped + $(rcli --scan --pattern '*:classes_seen' 2>/dev/null | wc -l)))
}
run_picked
# With classes: they were in force (not a vacuous run), seen on the suite's own Redis (the
# topology cases start servers of their own and stop them).
own=
for c in $picked; do
    case $c in sentinel_failover | failover_admits_no_one_extra | redis_over_tls | redis_cluster) ;; *) own=1 ;; esac
done
[ -z "${DBTHROTTLE_CLASSES:-}" ] || [ -z "$own" ] ||
    check "classes were in force: $shipped semaphores carried the workers' shipped definitions after the cases (summed over them)" '[ "$shipped" -gt 0 ]'

no_sanitizer_report
summary
