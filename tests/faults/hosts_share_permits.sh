# hosts_share_permits.sh - processes that pass permits between them die at any moment. 8 workers on two
# simulated hosts (4 per DBTHROTTLE_SHARE_DIR, once the library knows the setting) share
# MAX_QUERIES=3 (lease 1 s) with 10 ms probes; 60 rounds (the first 30 with host 0 alone) each
# SIGKILL one worker and start its replacement: a worker whose probe runs at the server (holding), one found idle at the server
# (waiting for a permit, or between two), or a fresh one as soon as its first probe returned
# (right after a release: with sharing, mid-handover). Every round must see work go on at the
# server within a bound; then half the workers are stopped cleanly (each must exit 0), the other
# half SIGKILLed, and Redis' holders and queue must be empty within lease + lease/3 of that last
# kill. Measured at the server (the counter's advisory locks) and in Redis (its own zsets).
#
# Sharing is expected to be active when code outside hostshare.c calls dbt_share_attach (run.sh's
# library_shares: the join of issue 19 landed); the case then also asserts that each host's segment
# file exists under its directory, and reports how many grants went without a Redis script call.
# Before that the two "hosts" are one pool as today, and the case checks the same bounds.
echo "# hosts_share_permits: 8 workers on two simulated hosts, 60 rounds of SIGKILLs"
mark
hs_limit=3
hs_lease_ms=1000
hs_uid=$(id -u)
hs_known= # the library knows DBTHROTTLE_SHARE_DIR (an unknown DBTHROTTLE_* name is an error)
share_dir_known && hs_known=1
hs_expect= # the library attaches to the host's segment
library_shares && hs_expect=1
info "host sharing: DBTHROTTLE_SHARE_DIR $([ -n "$hs_known" ] && echo known || echo unknown) to the library, segments $([ -n "$hs_expect" ] && echo attached by it || echo not used by it yet)"
mkdir -p "$work/hs.host0" "$work/hs.host1"
# hs_spawn SLOT GEN: worker SLOT (host SLOT % 2), generation GEN; touches hs.ready.SLOT.GEN once its
# first probe has returned.
hs_spawn() {
    wargs="-s 10 -W $work/hs.ready.$1.$2" spawn "$work/hs.out.$1.$2" PGAPPNAME=hs DBTHROTTLE_POOL=hs \
        DBTHROTTLE_MAX_QUERIES=$hs_limit DBTHROTTLE_LEASE=${hs_lease_ms}ms \
        ${hs_known:+DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR=$work/hs.host$(($1 % 2))}
    eval "hs_pid$1=$spawned hs_gen$1=$2"
}
# hs_holders: the pids of the workers whose probe runs at the server now (their backends hold the
# counter's advisory lock), by the backends' client ports, which ss maps to the worker processes.
hs_holders() {
    psql -qAtX -c "select a.client_port from pg_locks l join pg_stat_activity a on a.pid = l.pid
        where l.locktype = 'advisory' and l.granted and a.application_name = 'hs'" 2>/dev/null >"$work/hs.ports"
    ss -Htnp "( dport = :$PGPORT )" 2>/dev/null | awk -v f="$work/hs.ports" '
        BEGIN { while ((getline p < f) > 0) held[p] = 1 }
        { n = split($4, a, ":"); if ((a[n] in held) && match($0, /pid=[0-9]+/)) print substr($0, RSTART + 4, RLENGTH - 4) }'
}
hs_slot_of() { # hs_slot_of PID: the running slot whose current worker is PID, or nothing
    for i in $hs_active; do
        eval "[ \"\$hs_pid$i\" = \"$1\" ]" && { echo $i; return; }
    done
}
hs_c0=$(rcli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
# The first 30 rounds only host 0 runs (its waiters are then the whole queue: with sharing its
# processes pass permits among them, and the kills land in those handovers); from round 31 host 1
# runs too, and its first waiter ends that for host 0.
hs_active="0 2 4 6"
for i in $hs_active; do hs_spawn $i 0; done
wait_until 20 '[ "$(probes hs)" -ge 20 ]' || info "the workers were slow to start ($(probes hs) probes in 20 s)"
hs_any() { set -- $hs_active; shift $(rand $#); echo "$1"; } # a random slot that runs
hs_last=$(hs_any)
round=0 stalls=0 k_held=0 k_idle=0 k_fresh=0 k_random=0
while [ $round -lt 60 ]; do
    round=$((round + 1))
    if [ $round -eq 31 ]; then
        for i in 1 3 5 7; do hs_spawn $i 0; done
        hs_active="0 1 2 3 4 5 6 7"
        wait_until 20 "[ -e \"$work/hs.ready.1.0\" ] && [ -e \"$work/hs.ready.7.0\" ]" || info "host 1 was slow to start"
        if [ -n "$hs_expect" ]; then
            check "hosts_share_permits: sharing is active: each simulated host has its segment file" \
                '[ -n "$(ls -A "$work/hs.host0/dbthrottle-$hs_uid" 2>/dev/null)" ] && [ -n "$(ls -A "$work/hs.host1/dbthrottle-$hs_uid" 2>/dev/null)" ]'
        fi
    fi
    before=$(probes hs)
    victim=
    case $(rand 3) in
    0) # holding: one whose probe runs now
        victim=$(hs_holders | head -1)
        [ -n "$victim" ] && k_held=$((k_held + 1))
        ;;
    1) # idle at the server: waiting for a permit, or between two probes
        held=" $(hs_holders | tr '\n' ' ') "
        i=$(hs_any)
        eval "p=\$hs_pid$i"
        case $held in *" $p "*) ;; *) victim=$p k_idle=$((k_idle + 1)) ;; esac
        ;;
    2) # right after a release: last round's replacement, as soon as its first probe returned
        i=$hs_last
        eval "p=\$hs_pid$i g=\$hs_gen$i"
        if wait_until 10 "[ -e \"$work/hs.ready.$i.$g\" ]"; then victim=$p k_fresh=$((k_fresh + 1)); fi
        ;;
    esac
    if [ -z "$victim" ]; then # none found in that state: any, at a random moment
        sleep 0.0$(rand 3)$(rand 10)
        eval "victim=\$hs_pid$(hs_any)"
        k_random=$((k_random + 1))
    fi
    slot=$(hs_slot_of "$victim")
    [ -n "$slot" ] || { info "round $round: pid $victim is no worker of this case"; continue; }
    kill -9 "$victim" 2>/dev/null
    eval "g=\$hs_gen$slot"
    hs_spawn "$slot" $((g + 1))
    hs_last=$slot
    # the round is done when the server ran 3 more probes: never more than a lost permit's lease
    # plus a loaded machine's slack
    wait_until 10 "[ \$(probes hs) -ge $((before + 3)) ]" || {
        stalls=$((stalls + 1))
        info "round $round: no progress within 10 s ($(probes hs) probes, $before before)"
    }
done
# Stop the first two workers of each host cleanly, once each runs (its first probe returned: a
# replacement just started may not have its signal handler yet): each finishes its probe, exits 0.
term=
for i in 0 1 2 3; do
    eval "term=\"\$term \$hs_pid$i\" g=\$hs_gen$i"
    wait_until 10 "[ -e \"$work/hs.ready.$i.$g\" ]" || info "worker $i ran no probe within 10 s"
done
kill -TERM $term 2>/dev/null
bad=0
for p in $term; do
    wait_until 15 "! kill -0 $p 2>/dev/null || [ \"\$(awk '{print \$3}' /proc/$p/stat 2>/dev/null)\" = Z ]" || bad=$((bad + 1))
done
for p in $term; do wait "$p" || bad=$((bad + 1)); done
clean_ok=0
for i in 0 1 2 3; do eval "f=$work/hs.out.$i.\$hs_gen$i"; grep -q '^pid=.* ok=[1-9]' "$f" && clean_ok=$((clean_ok + 1)); done
longest=$(eval "max_field max_call_ms $work/hs.out.0.\$hs_gen0 $work/hs.out.1.\$hs_gen1 $work/hs.out.2.\$hs_gen2 $work/hs.out.3.\$hs_gen3")
# The last kill: the other four at once.
for i in 4 5 6 7; do eval "kill -9 \$hs_pid$i" 2>/dev/null; done
wait_until 5 '[ "$(live_holders)" -eq 0 ] && [ "$(live_waiters)" -eq 0 ]'
drain=$waited_ms
for p in $spawned_list; do wait "$p" 2>/dev/null; done
spawned_list=
n_probes=$(probes hs)
conc=$(max_conc hs)
hs_c1=$(rcli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
scripts=$((${hs_c1:-0} - ${hs_c0:-0}))
info "$round rounds: $k_held kills of a worker whose probe ran, $k_idle of one idle at the server, $k_fresh right after a first release, $k_random at a random moment"
# (Each grant through Redis costs at least one script call; renewals and withdrawals cost more. With
# both hosts waiting neither host's waiters are the whole queue, so most grants go through Redis.)
info "$n_probes probes ran, $scripts script calls to Redis ($(echo "$scripts $n_probes" | awk '{ printf "%.2f", $2 ? $1 / $2 : 0 }') a probe): at least $((n_probes > scripts ? n_probes - scripts : 0)) grants went without Redis${hs_expect:+ (sharing active)}"
check "hosts_share_permits: at most $hs_limit probes ran at once at the server (most seen: $conc)" '[ "$conc" -le $hs_limit ]'
check "hosts_share_permits: the pool was saturated, so the counter was tested (most seen: $conc = $hs_limit)" '[ "$conc" -eq $hs_limit ]'
check "hosts_share_permits: every round saw work go on within 10 s ($stalls stalled)" '[ "$stalls" -eq 0 ]'
check "hosts_share_permits: the 4 workers stopped cleanly exited 0 with their probes run ($bad bad exits, $clean_ok summaries; their longest call $longest ms, bound 10000)" '[ "$bad" -eq 0 ] && [ "$clean_ok" -eq 4 ] && [ "$longest" -le 10000 ]'
check "hosts_share_permits: after the last kill Redis' holders and queue were empty in $drain ms (lease + lease/3 = $((hs_lease_ms * 4 / 3)) ms, +400 ms of polling)" \
    '[ "$drain" -ge 0 ] && [ "$drain" -le $((hs_lease_ms * 4 / 3 + 400)) ]'
rcli flushall >/dev/null
wargs=
