# lib.sh - what every shell suite shares (sourced by tests/integration/run.sh,
# tests/faults/run.sh, tests/cli/run.sh and tests/soak/run.sh): a work directory cleaned up at
# exit, free loopback ports, a redis-server and a PostgreSQL of the suite's own, the independent
# concurrency counter at the server, Redis' own view of the pools, waiting for a condition, cases
# picked by name, and check reporting with the final count.
#
# A suite: sources this file, calls harness_begin NAME, starts the servers it needs (redis_start,
# pg_start, counter_install), runs its checks, and ends with summary (its exit status). It may
# define suite_cleanup, run at exit before the servers stop.
#
# The counter: dbt_probe(ms), at its start, takes an advisory lock keyed by its own
# application_name and backend pid, counts the granted locks of that application_name (itself
# included), writes "dbt_conc app=A n=N" to the server log, sleeps ms and unlocks (on an error or
# a cancel too; a session that ends loses its locks). Each probe holds its lock within its
# statement, so within the permit its client held: the largest N is a lower bound of the permits
# held at once that only a real overlap can raise. (Not a transaction-level lock: a permit kept
# idle in a transaction may legitimately pass to another once its lease runs out.) It is read from
# the server, not from anything the throttle says. (pg_stat_activity's count of 'active' backends
# was used before: it read 5 and 6 where the locks, at the same instants, were 3 and 2, so it
# cannot bound a limit of 4.)

top=$(cd "$(dirname "$0")/../.." && pwd)
# The sanitizer runs (make check-asan, check-tsan, check-valgrind) swap in their own builds:
# DBT_LIB the library, DBT_PRELOAD_FIRST a runtime to preload before it, DBT_WORKER the worker,
# DBT_WRAP a command to run each worker under, DBT_SANITIZER_LOGS where reports would go.
lib=${DBT_LIB:-$top/build/libdbthrottle.so}
preload=${DBT_PRELOAD_FIRST:+$DBT_PRELOAD_FIRST:}$lib
worker=${DBT_WORKER:-$top/build/tests/fault_worker}

# ---- reporting ----------------------------------------------------------------------------------
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
info() { echo "info - $*"; }
check() { # check "what" "condition" (one string, eval'ed) | check "what" command [args...]
    what=$1
    shift
    if [ $# -eq 1 ]; then
        if eval "$1"; then ok "$what"; else fail "$what"; fi
    elif "$@"; then ok "$what"; else fail "$what"; fi
}
# no_sanitizer_report: with DBT_SANITIZER_LOGS set (make check-asan, check-tsan, check-valgrind),
# a check that no process wrote a report there (the reports' first 40 lines follow); else nothing.
no_sanitizer_report() {
    [ -n "${DBT_SANITIZER_LOGS:-}" ] || return 0
    nsr=$(find "$(dirname "$DBT_SANITIZER_LOGS")" -name "$(basename "$DBT_SANITIZER_LOGS")*" -size +0 2>/dev/null)
    check "no sanitizer report from any preloaded process${nsr:+: $nsr}" '[ -z "$nsr" ]'
    for f in $nsr; do head -40 "$f"; done
}
# crash_frames FILE: each crash report in FILE, its frames resolved to function and line where
# the object has them (addr2line).
crash_frames() {
    grep -A48 "^[a-z_]* [0-9]*: fatal signal [0-9]* at " "$1" | while IFS= read -r cf_line; do
        case $cf_line in
        "  #"*+0x*)
            cf_obj=${cf_line#*\#* }
            cf_off=${cf_obj##*+}
            cf_obj=${cf_obj%+*}
            echo "# $cf_line  $(addr2line -f -i -p -C -e "$cf_obj" "$cf_off" 2>/dev/null | tr '\n' ' ')"
            ;;
        "  #"*) echo "# $cf_line" ;;
        *fatal\ signal*) echo "# $cf_line" ;;
        *) ;;
        esac
    done
}
# expect_preload_failure FILE: FILE holds ld.so's line on purpose (a test of what we say about a
# preload ld.so skips): summary's check leaves it out.
expect_preload_failure() {
    preload_failures_expected="${preload_failures_expected:+$preload_failures_expected
}$1"
}
# summary: the last line of every suite; its status is the suite's.
summary() {
    # ld.so ignores a preload it cannot open or map, and the program runs unthrottled, saying so
    # in one line on its stderr: a CI run once had the build tree's library relinked under it by
    # another lane (8 statements at once at a limit of 4, and no other sign). The tests' outputs
    # are in $work: none may hold that line.
    sm_preload=$(grep -rIl "from LD_PRELOAD cannot be preloaded" "$work" 2>/dev/null |
        grep -vxF -e "${preload_failures_expected:-/}" | head -5 | tr '\n' ' ')
    check "no program failed to preload the library${sm_preload:+: $sm_preload}" '[ -z "$sm_preload" ]'
    sm_left=$(shm_left)
    check "the suite left no host segment in /dev/shm${sm_left:+: $sm_left}" '[ -z "$sm_left" ]'
    # A test program that dies of a fault says where on its stderr (tests/support/crash_report.c),
    # whether or not the case that ran it looks at its exit status.
    sm_crashed=$(grep -rIl "^[a-z_]* [0-9]*: fatal signal [0-9]* at " "$work" 2>/dev/null | head -5 | tr '\n' ' ')
    check "no test program died of a fault${sm_crashed:+: $sm_crashed}" '[ -z "$sm_crashed" ]'
    for f in $sm_crashed; do crash_frames "$f"; done
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

# ---- cases by name ------------------------------------------------------------------------------
# pick_cases NAME...: checks the names against the suite's $cases and sets $picked to them, or to
# all of $cases (in that order) when none is given. An unknown name ends the suite (exit 2) before
# any server starts. The suite runs each with its own run_case NAME.
pick_cases() {
    for pc_name in "$@"; do
        is_case "$pc_name" || {
            echo "no case \"$pc_name\"; the cases are:" $cases >&2
            exit 2
        }
    done
    picked=${*:-$cases}
}
is_case() { case " $(echo $cases) " in *" $1 "*) return 0 ;; esac; return 1; }
# skip_cases SETTING NAME...: takes the named cases out of $picked (make check leaves the slow
# ones to make test; make test's second and third fault passes leave out what they cannot change).
# An unknown name ends the suite, naming SETTING, where it came from.
skip_cases() {
    sc_from=$1
    shift
    for sc_name in "$@"; do
        is_case "$sc_name" || {
            echo "$sc_from: no case \"$sc_name\"" >&2
            exit 2
        }
        picked=$(echo " $(echo $picked) " | sed "s/ $sc_name / /")
    done
}
# Each case's duration is printed after it ("info - NAME took N s"), so that the slow ones are
# known when make test nears its time budget.
run_picked() {
    for rp_name in $picked; do
        rp_t0=$(date +%s)
        run_case "$rp_name"
        info "$rp_name took $(($(date +%s) - rp_t0)) s"
    done
}

# ---- the work directory and cleanup -------------------------------------------------------------
# harness_begin NAME: makes $work (/tmp/dbt-NAME-XXXXXX, readable by the postgres user) and
# arranges that at exit every process listed in $work/pids that is still ours is killed,
# suite_cleanup runs, the servers stop and $work goes (DBT_KEEP=1 keeps it, and says where).
harness_begin() {
    work=$(mktemp -d "/tmp/dbt-$1-XXXXXX")
    chmod 755 "$work"
    # Every process the suite starts carries it (see ours).
    DBT_HARNESS_RUN=$work
    export DBT_HARNESS_RUN
    # Nothing of the machine's own configuration reaches the suite: DBTHROTTLE_CONFIG set empty
    # keeps every process it starts (the library, the command) from reading an installed
    # /etc/dbthrottle.conf (a case that wants a file names one of $work), and HOME is a directory
    # of $work, so that psql, libpq, redis-cli and tmux read no ~/.psqlrc, ~/.pgpass,
    # ~/.pg_service.conf or other file of the user who runs the tests. (make check runs its suites
    # with a broken /etc/dbthrottle.conf and HOME: tools/hostile-host.sh.)
    DBTHROTTLE_CONFIG=
    mkdir "$work/home"
    HOME=$work/home
    export DBTHROTTLE_CONFIG HOME
    unset PGSERVICEFILE PGSERVICE PGPASSFILE PSQLRC
    # Host sharing's segments too (DBTHROTTLE_SHARE_DIR, /dev/shm by default, where they outlive
    # the suite: a file per pool and Redis). Mode 1777 as /dev/shm, so that a process of another
    # user makes its own directory in it as there. Not for a library older than the setting (an
    # unknown DBTHROTTLE_* name is a configuration error).
    ls -d /dev/shm/dbthrottle-"$(id -u)"*/* >"$work/shm.before" 2>/dev/null
    mkdir "$work/shm"
    chmod 1777 "$work/shm"
    if ! [ -f "$lib" ] || grep -q DBTHROTTLE_SHARE_DIR "$lib"; then
        DBTHROTTLE_SHARE_DIR=$work/shm
        export DBTHROTTLE_SHARE_DIR
    fi
    trap harness_cleanup EXIT
    trap 'exit 1' INT TERM
}
# shm_left: the host segments this run left in /dev/shm, one a line: those made since
# harness_begin whose key names a Redis port of the run (each port free_port gave; a segment holds
# its Redis URL in its key), so that what other runs on the machine make there is not counted.
shm_left() {
    for sl_f in /dev/shm/dbthrottle-"$(id -u)"*/*; do
        [ -f "$sl_f" ] || continue
        grep -qxF "$sl_f" "$work/shm.before" 2>/dev/null && continue
        for sl_p in $(cat "$work/ports" 2>/dev/null); do
            if grep -aq "127\.0\.0\.1:$sl_p[^0-9]" "$sl_f"; then
                echo "$sl_f"
                break
            fi
        done
    done
}
harness_cleanup() {
    for p in $(sort -u "$work"/pids 2>/dev/null); do
        ours "$p" || continue
        kill -CONT "$p" 2>/dev/null
        kill -9 "$p" 2>/dev/null
    done
    command -v suite_cleanup >/dev/null && suite_cleanup
    [ -n "${redis_pid:-}" ] && kill -9 "$redis_pid" 2>/dev/null
    pg_stop
    if [ -n "${DBT_KEEP:-}" ]; then echo "# kept $work"; else rm -rf "$work"; fi
}

# ours PID: whether PID is still a process of this run. A pid listed in $work/pids (or a server's
# pid file) names a process that may have ended long ago, and pids come round again (32768 of
# them, used up in minutes while suites run side by side): killed blindly, it is another
# program's process by then (a finished fault suite's list of 533 pids named 10 live processes
# of other programs, other suites' redis-servers among them). A pre-fork child of
# sentinel_failover that ended with no report and no word (CI, once) fits that: nothing in the
# library reproduced it, and a run beside other suites had 8 of its workers end with SIGKILL,
# which that case never sends. Ours: a descendant of this shell, or a process whose environment
# names this run (DBT_HARNESS_RUN, inherited), or one working in $work (a daemonized server,
# reparented, whose title may overwrite its environment).
ours() {
    [ -d "/proc/$1" ] || return 1
    ou_p=$1
    ou_n=0
    while [ "$ou_p" -gt 1 ] 2>/dev/null && [ $ou_n -lt 64 ]; do
        [ "$ou_p" = "$$" ] && return 0
        # "pid (comm) S ppid ...": comm may hold anything, so the fields after its last ')'.
        ou_p=$(sed -n 's/.*) [A-Za-z] \([0-9][0-9]*\) .*/\1/p' "/proc/$ou_p/stat" 2>/dev/null)
        [ -n "$ou_p" ] || break
        ou_n=$((ou_n + 1))
    done
    [ -n "${work:-}" ] || return 1
    { tr '\0' '\n' <"/proc/$1/environ"; } 2>/dev/null | grep -qxF "DBT_HARNESS_RUN=$work" && return 0
    case $(readlink "/proc/$1/cwd" 2>/dev/null) in "$work" | "$work"/*) return 0 ;; esac
    return 1
}

# free_port: a loopback port nothing listens on or connects from now (a server that then loses
# the race for it is started again on another one).
free_port() {
    while :; do
        fp=$(($(od -An -N2 -tu2 /dev/urandom) % 30000 + 20000))
        ss -Htan "( sport = :$fp )" 2>/dev/null | grep -q . || break
    done
    [ -n "${work:-}" ] && echo "$fp" >>"$work/ports" # for shm_left
    echo "$fp"
}

# ---- Redis --------------------------------------------------------------------------------------
# redis_start [extra options...]: on $rport (chosen on first start, kept across restarts so the
# workers find it again), data in $work/redis, pid in $redis_pid; exports DBTHROTTLE_REDIS_URL.
# Redis runs ahead of the workers and the machine's other work (when allowed: root), as a server
# of its own would: a reply later than the workers' Redis timeout must be a fault the case made,
# not the scheduler's (make test's lanes at a load of 8 on 2 cores: 64 workers in open mode took
# Redis, back after a restart, for still away 7 s on, and ran unthrottled).
# Real-time round robin (chrt -r 1), not nice -10: on the 2-core test VM (Linux 6.18, EEVDF) at a
# load of 8-18, a nice -10 Redis Cluster node spent up to 1.12 s inside one HINCRBY of a script
# (SLOWLOG, 7 runs of redis_cluster beside two busy loops: 3-37 commands over 10 ms per node, up
# to 6 over 100 ms), its replies came all late together, and the workers refused or cancelled
# for it with 1-2 s timeouts; a 1 ms timer at nice -10 woke up to 82 ms late there, as at nice 0
# (88 ms), at chrt -r 1 1.6 ms. With chrt -r 1, 8 such runs logged no command over 10 ms on any
# node. Redis waits in epoll when idle: it takes no more CPU so, and the kernel's real-time
# throttling leaves the rest 5% all the same. Where real time is refused, nice -10 as before.
redis_nice() {
    [ "$(id -u)" -eq 0 ] || return 0
    if chrt -r 1 true 2>/dev/null; then echo "chrt -r 1"; else echo "nice -n -10"; fi
}
# ahead_begin / ahead_end: the calling shell, and what it starts meanwhile, runs at Redis' real-time
# priority (redis_nice), for a step whose pace is the case's own input (a slot migrated by hand
# at one key every 20 ms): the pace the case means, not the load's. Nothing without real time.
ahead_begin() { [ "$(redis_nice)" = "chrt -r 1" ] && chrt -r -p 1 $$ >/dev/null 2>&1; return 0; }
ahead_end() { chrt -o -p 0 $$ >/dev/null 2>&1; return 0; }
redis_start() {
    mkdir -p "$work/redis"
    rs_tries=0
    while :; do
        [ -n "${rport:-}" ] || rport=$(free_port)
        $(redis_nice) redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
            --dir "$work/redis" --logfile "$work/redis/redis.log" --enable-debug-command yes "$@" &
        redis_pid=$!
        i=0
        until rcli ping 2>&1 | grep -qE "PONG|NOAUTH"; do
            i=$((i + 1))
            kill -0 "$redis_pid" 2>/dev/null && [ $i -lt 200 ] || break
            sleep 0.05
        done
        rcli ping 2>&1 | grep -qE "PONG|NOAUTH" && break
        kill -9 "$redis_pid" 2>/dev/null
        rs_tries=$((rs_tries + 1))
        [ $rs_tries -lt 5 ] || { echo "FAIL - redis-server did not start"; exit 1; }
        [ -n "${redis_started:-}" ] || rport= # the port was taken: another one
        sleep 0.2
    done
    redis_started=1
    export DBTHROTTLE_REDIS_URL=redis://127.0.0.1:$rport
}
redis_kill() { kill -9 "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; redis_pid=; }
redis_stop() { [ -n "${redis_pid:-}" ] && { kill -TERM "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; }; redis_pid=; }
rcli() { redis-cli -p "$rport" "$@"; }

# listening PID...: whether each process named has a connection to the suite's Redis whose last
# command was BLPOP, its listener's (Redis' CLIENT LIST, its addr matched to the process' local
# port by ss). A waiter counted in Redis' queue may not listen yet: its listener connects (INFO,
# a reply) and sends its BLPOP after the acquire's reply; a Redis stopped in between fails that
# call, and the waiter gives up as in any outage (docs/design.md, "Failover and data loss").
# A process of a host relay's (DBTHROTTLE_HOST_RELAY) has no connection of its own: it counts
# when one of its unix connections leads to a relay socket (relay-*.sock) whose speaker listens
# so (each relayed BLPOP's keys are in the speaker's within a round trip: docs/design.md).
listening() {
    _blpop_ports=$(rcli client list | awk '/ cmd=blpop / { for (i = 1; i <= NF; i++)
        if ($i ~ /^addr=/) { n = split($i, a, ":"); print a[n] } }')
    for _pid in "$@"; do
        _found=
        _blpop_of "$_pid" && _found=yes
        if [ -z "$_found" ]; then
            _unix=$(ss -xpH state established 2>/dev/null)
            # ss -x with a state: type, queues, local path and inode, peer path and inode, users.
            for _peer in $(echo "$_unix" | awk -v p="pid=$_pid," 'index($0, p) { print $7 }'); do
                _speaker=$(echo "$_unix" | awk -v i="$_peer" '$5 == i && $4 ~ /relay-[0-9a-f]*\.sock$/' |
                    grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
                [ -n "$_speaker" ] && _blpop_of "$_speaker" && _found=yes && break
            done
        fi
        [ -n "$_found" ] || return 1
    done
}
_blpop_of() { # _blpop_of PID: one of _blpop_ports is a connection of PID's
    for _port in $_blpop_ports; do
        ss -tnpH state established "( sport = :$_port and dport = :$rport )" |
            grep -q "pid=$1," && return 0
    done
    return 1
}

# live_holders / live_waiters [KIND [PREFIX]]: permits (waiters) whose lease has not run out, over
# every pool, by Redis' own clock (expired entries that no script has reaped yet do not count).
live_count() { # live_count ZSET_SUFFIX [KIND [PREFIX]]
    rcli --raw eval "local now = redis.call('TIME') now = now[1] * 1000 + math.floor(now[2] / 1000)
        local n, cur = 0, '0'
        repeat
            local r = redis.call('SCAN', cur, 'MATCH', ARGV[2] .. '*:' .. ARGV[1] .. ':' .. ARGV[3], 'COUNT', 1000)
            cur = r[1]
            for _, k in ipairs(r[2]) do n = n + redis.call('ZCOUNT', k, now, '+inf') end
        until cur == '0'
        return n" 0 "${2:-q}" "${3-dbthrottle:}" "$1"
}
live_holders() { live_count holders "$@"; }
# quarantine_left [PREFIX]: the ms until the last quarantine of any pool ends, by Redis' own clock
# (each era key's UNTIL: docs/design.md, "Failover and data loss"); 0 when none runs.
quarantine_left() {
    rcli --raw eval "local now = redis.call('TIME') now = now[1] * 1000 + math.floor(now[2] / 1000)
        local left, cur = 0, '0'
        repeat
            local r = redis.call('SCAN', cur, 'MATCH', ARGV[1] .. '*:era', 'COUNT', 1000)
            cur = r[1]
            for _, k in ipairs(r[2]) do
                local u = tonumber(string.match(redis.call('GET', k) or '', '^%S+ (%d+)') or 0)
                if u - now > left then left = u - now end
            end
        until cur == '0'
        return left" 0 "${1-dbthrottle:}"
}
live_waiters() { live_count wexp "$@"; }
# grants_made: the grants Redis made in every pool, by its own counters (q:stats grants).
grants_made() { rcli --raw eval "local n = 0 for _, k in ipairs(redis.call('KEYS', 'dbthrottle:*:q:stats')) do n = n + (tonumber(redis.call('HGET', k, 'grants')) or 0) end return n" 0; }
# nothing_left [KIND [PREFIX [SECONDS]]]: true once no live holder or waiter is left, within
# SECONDS (1 by default): the workers' last releases are sent as they exit and not waited for, so
# Redis may apply them just after (a permit left behind lives a lease, 10 s by default: still
# caught). On failure, prints what is left (the ids and their lease expiries, holders and waiters,
# and Redis' clock) for the log.
# Workers that end with _exit (FAULT_EXIT_NOW, under the ASan runtime: fault_worker.c) skip the
# library's exit: what a process holds for its next waiter (a permit or place another process of
# its host passed it, with host sharing) returns with its lease, as for a killed process: one
# lease (10 s by default) and a renewal period are allowed then.
nothing_left() {
    nl_kind=${1:-q} nl_prefix=${2-dbthrottle:} nl_bound=${3:-1}
    [ -n "${FAULT_EXIT_NOW:-}" ] && [ "$nl_bound" -lt 14 ] && nl_bound=14
    wait_until "$nl_bound" nl_none && return 0
    echo "# still held or queued: $(live_count holders "$nl_kind" "$nl_prefix") holders, $(live_count wexp "$nl_kind" "$nl_prefix") waiters; Redis' clock $(rcli --raw time | tr '\n' ' ')"
    for z in holders wexp; do
        rcli --raw --scan --pattern "$nl_prefix*:$nl_kind:$z" | while read -r k; do
            rcli --raw zrange "$k" 0 9 withscores | paste - - | sed "s|^|# $k |"
        done
    done
    return 1
}
nl_none() { [ "$(live_count holders "$nl_kind" "$nl_prefix")" -eq 0 ] && [ "$(live_count wexp "$nl_kind" "$nl_prefix")" -eq 0 ]; }

# ---- PostgreSQL ---------------------------------------------------------------------------------
# pg_start: a throwaway PostgreSQL in $work/pg (tools/pgtmp.sh: initdb and pg_ctl, as the postgres
# user when root) on a free loopback port; exports PGHOST, PGPORT, PGUSER and PGDATABASE.
pg_start() {
    PGPORT=$(sh "$top/tools/pgtmp.sh" start "$work/pg") || { echo "FAIL - PostgreSQL did not start"; exit 1; }
    export PGHOST=127.0.0.1 PGPORT PGUSER=postgres PGDATABASE=postgres
}
pg_restart() { sh "$top/tools/pgtmp.sh" restart "$work/pg" >/dev/null 2>&1; }
pg_stop() { sh "$top/tools/pgtmp.sh" stop "$work/pg" 2>/dev/null; }

# counter_install: the counter described at the top, as the function dbt_probe(ms).
counter_install() {
    psql -qAtX <<'SQL' >/dev/null
CREATE FUNCTION dbt_probe(ms int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int; app text := current_setting('application_name'); k int := hashtext(app);
BEGIN
    PERFORM pg_advisory_lock(k, pg_backend_pid());
    BEGIN
        SELECT count(*) INTO n FROM pg_locks
         WHERE locktype = 'advisory' AND classid = k::oid AND objsubid = 2 AND granted;
        RAISE LOG 'dbt_conc app=% n=%', app, n;
        PERFORM pg_sleep(ms / 1000.0);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(k, pg_backend_pid());
        RAISE;
    END;
    PERFORM pg_advisory_unlock(k, pg_backend_pid());
    RETURN n;
END $$;
SQL
}
# mark: remembers where the server log is now; max_conc APP: the most probes of application APP
# that ran at once since the mark; probes APP: how many ran since the mark.
mark() { log_mark=$(wc -l <"$work/pg/server.log"); }
max_conc() {
    tail -n +"$((log_mark + 1))" "$work/pg/server.log" |
        awk -v app="app=$1" '$0 ~ "dbt_conc " app " n=" { sub(/.* n=/, ""); if ($1 + 0 > m) m = $1 + 0 } END { print m + 0 }'
}
probes() {
    tail -n +"$((log_mark + 1))" "$work/pg/server.log" | grep -c "dbt_conc app=$1 n="
}

# ---- running things -----------------------------------------------------------------------------
throttled() { env LD_PRELOAD="$preload" "$@"; } # throttled [ENV=VALUE...] command...

# wait_until SECONDS "condition": polls every 20 ms; true if it held in time; how long in $waited_ms.
wait_until() {
    wu_t0=$(date +%s%N)
    wu_end=$((wu_t0 + $1 * 1000000000))
    while ! eval "$2"; do
        [ "$(date +%s%N)" -lt "$wu_end" ] || { waited_ms=-1; return 1; }
        sleep 0.02
    done
    waited_ms=$((($(date +%s%N) - wu_t0) / 1000000))
    return 0
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
rand() { echo $(($(od -An -N2 -tu2 /dev/urandom) % $1)); }
