# sentinel_failover.sh - Redis behind Sentinel (a primary, two replicas, three sentinels this case
# starts: tests/support/topology.sh). 16 workers (MAX_QUERIES=4, closed, lease 2 s,
# REDIS_TIMEOUT=300ms) reach the master through a redis-sentinel:// URL whose first sentinel is
# down: they throttle (the server's advisory-lock counter). A manual failover (SENTINEL FAILOVER)
# and then a kill -9 of the primary mid-run: grants resume on the new master (Redis' own holders
# there), the old master gets no script call any more, the processes heard +switch-master, the
# limit holds once settled, every worker exits cleanly. The times from each fault to the
# sentinels naming the new master and to the first grant on it are printed. Then: a master name
# no sentinel knows is refused with a line naming it; sentinels with requirepass are reached with
# DBTHROTTLE_SENTINEL_PASSWORD_FILE (and refused, naming that setting, without it), the master's
# password from DBTHROTTLE_REDIS_PASSWORD_FILE.
echo "# sentinel_failover: a master found through Sentinel, followed across a failover and a kill -9"
. "$here/../support/topology.sh"

sf_dir=$work/sentinel
sf_up=1
topology_sentinel_start "$sf_dir" || sf_up=
cat "$sf_dir"/*.pid >>"$work/pids" 2>/dev/null
check "sentinel_failover: the topology came up (primary $topo_primary_port, replicas $topo_replica_ports, sentinels $topo_sentinel_ports)" '[ -n "$sf_up" ]'

# sf_holders PORT: live holders in the Redis on PORT, by its own clock; sf_script_calls PORT: the
# script calls (run or rejected) that Redis has taken from clients.
sf_holders() { (rport=$1 live_holders 2>/dev/null) || echo 0; }
sf_script_calls() {
    topo_cli "$1" info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_evalsha:/ { n += $3 + $9 + $11 } END { print n + 0 }'
}

# sf_fault NAME COMMAND: runs COMMAND (the fault) with the workers running, then measures: until
# the sentinels name another master (detection), until that master holds a permit (first grant).
sf_fault() {
    mark
    sf_old=$(topology_master_port)
    sf_t0=$(now_ms)
    eval "$2"
    if wait_until 60 '[ -n "$(topology_master_port)" ] && [ "$(topology_master_port)" != "$sf_old" ]'; then
        sf_detect=$waited_ms
        sf_new=$(topology_master_port)
        wait_until 60 '[ "$(sf_holders $sf_new)" -gt 0 ]'
        sf_grant=$(($(now_ms) - sf_t0))
        [ "$waited_ms" -ge 0 ] || sf_grant=-1
        # When the processes left the old master: its script calls stop.
        sf_left=
        if [ "$1" != kill ]; then
            sf_left=-1
            sf_c=$(sf_script_calls "$sf_old")
            while [ $(($(now_ms) - sf_t0)) -lt 30000 ]; do
                sleep 0.5
                sf_c2=$(sf_script_calls "$sf_old")
                [ "$sf_c2" -eq "$sf_c" ] && { sf_left=$(($(now_ms) - sf_t0 - 500)); break; }
                sf_c=$sf_c2
            done
        fi
    else
        sf_detect=-1 sf_grant=-1 sf_new=
    fi
    info "$1: the sentinels named the new master $sf_new after $sf_detect ms; its first grant came $sf_grant ms after the fault${sf_left:+; the old master's last script call about $sf_left ms after it}"
    check "sentinel_failover ($1): the sentinels named a new master and it granted permits within 60 s" '[ "$sf_detect" -ge 0 ] && [ "$sf_grant" -ge 0 ]'
    # Across the fault itself the bound is part of the eras' work (docs/design.md): shown here.
    info "$1: across the fault at most $(max_conc sf) ran at once ($(probes sf) probes)"
    # Settled: the old master (a replica now, or dead) takes no script call; the limit holds.
    sleep 1
    [ "$1" = kill ] || sf_calls0=$(sf_script_calls "$sf_old")
    mark
    sleep 3
    [ "$1" = kill ] || sf_calls1=$(sf_script_calls "$sf_old")
    sf_max=$(max_conc sf)
    sf_n=$(probes sf)
    check "sentinel_failover ($1): once settled, at most 4 ran at once on the new master (most seen: $sf_max in $sf_n probes)" '[ "$sf_max" -le 4 ] && [ "$sf_max" -ge 2 ] && [ "$sf_n" -ge 50 ]'
    [ "$1" = kill ] ||
        check "sentinel_failover ($1): the old master $sf_old took no script call any more ($sf_calls0 then $sf_calls1)" '[ "$sf_calls0" -eq "$sf_calls1" ]'
}

if [ -n "$sf_up" ]; then
    # The first sentinel of the list: a port nothing listens on.
    sf_url="redis-sentinel://127.0.0.1:$(free_port),$topo_sentinels/mymaster"
    sf_env="PGAPPNAME=sf DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LEASE=2s DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_ON_REDIS_ERROR=closed DBTHROTTLE_REDIS_URL=$sf_url"
    : >"$work/workers.err"
    # A pre-fork server beside them (its own pool): a parent that reached Redis, then 2 children.
    wargs="-n 0 -s 20 -F 2"
    spawn "$work/sff.out" PGAPPNAME=sff DBTHROTTLE_POOL=sff DBTHROTTLE_MAX_QUERIES=4 \
        DBTHROTTLE_LEASE=2s DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_LOG="$work/sff.log" \
        DBTHROTTLE_REDIS_URL="$sf_url"
    sf_fork_pid=$spawned
    spawned_list=
    wargs="-n 0 -s 20"
    i=0
    while [ $i -lt 16 ]; do spawn "$work/sf.$i" $sf_env; i=$((i + 1)); done
    wait_until 30 '[ "$(sf_holders $topo_primary_port)" -gt 0 ]' >/dev/null
    mark
    sleep 3
    sf_max=$(max_conc sf)
    sf_n=$(probes sf)
    check "sentinel_failover: through Sentinel (its first sentinel down) at most 4 ran at once (most seen: $sf_max in $sf_n probes), on the primary (holders there: $(sf_holders $topo_primary_port))" '[ "$sf_max" -le 4 ] && [ "$sf_max" -ge 2 ] && [ "$sf_n" -ge 50 ]'

    sf_fault failover 'topo_scli "${topo_sentinel_ports%% *}" sentinel failover mymaster >/dev/null'
    # Each process's subscriber heard the failover (its sentinel_switch line, one per process).
    wait_until 30 '[ "$(grep -c "event=sentinel_switch" "$work/workers.err")" -ge 16 ]'
    sf_switches=$(grep -c "event=sentinel_switch" "$work/workers.err")
    sf_heard=$(grep "event=sentinel_switch" "$work/workers.err" | sed 's/.*heard=//; s/ .*//' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
    check "sentinel_failover (failover): each worker's subscriber heard the failover ($sf_switches sentinel_switch lines: $sf_heard)" '[ "$sf_switches" -ge 16 ]'
    # The pre-fork server's parent and each child followed it on a subscriber of its own.
    sf_fork_pids() { grep "event=sentinel_switch" "$work/sff.log" 2>/dev/null | sed 's/.* pid=//; s/ .*//' | sort -u | wc -l; }
    wait_until 30 '[ "$(sf_fork_pids)" -ge 3 ]'
    check "sentinel_failover (failover): a pre-fork server's parent and its 2 forked children each heard it ($(sf_fork_pids) processes logged sentinel_switch)" '[ "$(sf_fork_pids)" -ge 3 ]'
    # The sentinels agree again (the old master a replica of the new) before the next fault.
    topology_sentinel_ready 60 "$(topology_master_port)" >/dev/null

    sf_kill_pid=$(topology_pid_of "$sf_dir" "$(topology_master_port)")
    sf_fault kill 'kill -9 $sf_kill_pid'

    # SIGTERM to the parent only: it passes it on to its children, as a pre-fork server's master
    # does (the test once looked them up with awk over /proc/[0-9]*/stat: mawk stops at the first
    # file it cannot open, so a process ending meanwhile hid the children, never stopped).
    kill -TERM "$sf_fork_pid" 2>/dev/null
    wait_until 20 '[ "$(grep -c "^pid=" "$work/sff.out")" -eq 3 ]'
    # Bounded: a child that never ends would hold its parent, and this shell's wait, forever.
    if ! wait_until 20 '! [ -d /proc/$sf_fork_pid ] || [ "$(cut -d" " -f3 /proc/$sf_fork_pid/stat 2>/dev/null)" = Z ]'; then
        for p in $(cat /proc/$sf_fork_pid/task/*/children 2>/dev/null); do
            info "pre-fork child $p did not end: $(tail -3 /proc/$p/stack 2>/dev/null | tr '\n' ' ')"
            grep " pid=$p " "$work/sff.log" | tail -5
            kill -KILL "$p" 2>/dev/null
        done
    fi
    wait "$sf_fork_pid"
    sf_fork_rc=$?
    check "sentinel_failover: the pre-fork server and its children exited cleanly (exit $sf_fork_rc, $(grep -c '^pid=' "$work/sff.out") reports)" '[ "$sf_fork_rc" -eq 0 ] && [ "$(grep -c "^pid=" "$work/sff.out")" -eq 3 ]'
    # Evidence for a failure: how each bad child ended (fault_worker says so on stderr).
    [ "$sf_fork_rc" -eq 0 ] || grep -E "fault_worker $sf_fork_pid: child [0-9]+ (killed|exited)" "$work/workers.err"
    for p in $spawned_list; do kill -TERM "$p" 2>/dev/null; done
    sf_crashed=0
    for p in $spawned_list; do wait "$p" || sf_crashed=$((sf_crashed + 1)); done
    spawned_list=
    sf_lines=$(cat "$work"/sf.* | grep -c "^pid=")
    check "sentinel_failover: all 16 workers ran to the end and exited cleanly ($sf_lines reports, $sf_crashed bad exits)" '[ "$sf_lines" -eq 16 ] && [ "$sf_crashed" -eq 0 ]'

    # A master name no sentinel knows: refused, its line names it; nothing ran at the server.
    mark
    PGAPPNAME=sf_name throttled DBTHROTTLE_MAX_QUERIES=2 \
        DBTHROTTLE_REDIS_URL="redis-sentinel://$topo_sentinels/nosuchmaster" \
        psql -X -c "SELECT dbt_probe(0)" >"$work/sf.name.out" 2>&1
    sf_rc=$?
    check "sentinel_failover: an unknown master name is refused (psql exit $sf_rc), naming it and DBTHROTTLE_REDIS_URL, and never ran ($(probes sf_name) probes)" \
        '[ "$sf_rc" -ne 0 ] && grep -q "does not know the master" "$work/sf.name.out" && grep -q nosuchmaster "$work/sf.name.out" && grep -q DBTHROTTLE_REDIS_URL "$work/sf.name.out" && [ "$(probes sf_name)" -eq 0 ]'
    topology_stop "$sf_dir"
fi

# Sentinels that require a password, and a master that does.
sf_pdir=$work/sentinel-auth
sf_up=1
TOPO_SENTINEL_PASS=sentinel-s3cret TOPO_DATA_PASS=data-s3cret topology_sentinel_start "$sf_pdir" || sf_up=
cat "$sf_pdir"/*.pid >>"$work/pids" 2>/dev/null
check "sentinel_failover: the topology with passwords came up" '[ -n "$sf_up" ]'
if [ -n "$sf_up" ]; then
    printf 'sentinel-s3cret\n' >"$work/sf.spw"
    printf 'data-s3cret\n' >"$work/sf.dpw"
    chmod 600 "$work/sf.spw" "$work/sf.dpw"
    mark
    PGAPPNAME=sf_auth throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="redis-sentinel://$topo_sentinels/mymaster" \
        DBTHROTTLE_SENTINEL_PASSWORD_FILE="$work/sf.spw" DBTHROTTLE_REDIS_PASSWORD_FILE="$work/sf.dpw" \
        psql -X -c "SELECT dbt_probe(0)" >"$work/sf.auth.out" 2>&1
    sf_rc=$?
    check "sentinel_failover: sentinels with requirepass reached with DBTHROTTLE_SENTINEL_PASSWORD_FILE, the master with DBTHROTTLE_REDIS_PASSWORD_FILE (psql exit $sf_rc, $(probes sf_auth) probe ran)" \
        '[ "$sf_rc" -eq 0 ] && [ "$(probes sf_auth)" -eq 1 ]'
    mark
    PGAPPNAME=sf_noauth throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="redis-sentinel://$topo_sentinels/mymaster" \
        DBTHROTTLE_REDIS_PASSWORD_FILE="$work/sf.dpw" \
        psql -X -c "SELECT dbt_probe(0)" >"$work/sf.noauth.out" 2>&1
    sf_rc=$?
    check "sentinel_failover: without the sentinels' password: refused (psql exit $sf_rc), naming DBTHROTTLE_SENTINEL_PASSWORD_FILE, never ran ($(probes sf_noauth) probes), no secret shown" \
        '[ "$sf_rc" -ne 0 ] && grep -q DBTHROTTLE_SENTINEL_PASSWORD_FILE "$work/sf.noauth.out" && [ "$(probes sf_noauth)" -eq 0 ] && ! grep -q s3cret "$work/sf.noauth.out" "$work/sf.auth.out"'
    # A password file others may read: used, and warned about once, naming setting and mode.
    chmod 644 "$work/sf.dpw"
    mark
    PGAPPNAME=sf_open throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="redis-sentinel://$topo_sentinels/mymaster" \
        DBTHROTTLE_SENTINEL_PASSWORD_FILE="$work/sf.spw" DBTHROTTLE_REDIS_PASSWORD_FILE="$work/sf.dpw" \
        psql -X -c "SELECT dbt_probe(0)" >"$work/sf.open.out" 2>&1
    sf_rc=$?
    check "sentinel_failover: a password file group or others may read is used (psql exit $sf_rc, $(probes sf_open) probe ran) with one password_file_open warning naming the setting and mode 0644" \
        '[ "$sf_rc" -eq 0 ] && [ "$(probes sf_open)" -eq 1 ] && [ "$(grep -c "event=password_file_open" "$work/sf.open.out")" -eq 1 ] && grep "event=password_file_open" "$work/sf.open.out" | grep -q "DBTHROTTLE_REDIS_PASSWORD_FILE.*0644" && ! grep -q s3cret "$work/sf.open.out"'
    topology_stop "$sf_pdir"
fi
wargs=
