# processes_share_a_host.sh - host-level sharing (docs/design.md, "Host-level sharing"): the
# single-threaded processes of one host pass permits among themselves without Redis while the
# host's waiters are the whole queue. Measured from outside: the server's own count of probes
# running at once (never above the limit), Redis' INFO commandstats (commands per grant), the
# queue's ids in Redis, and Redis' live holders after kills.
echo "# processes_share_a_host: 16 processes of one host, two hosts, kills, sharing off, a bad share dir"

# The scripts and BLPOPs the library sent since Redis started (commands its scripts run inside
# are counted apart by Redis: not these).
redis_calls() {
    rcli info commandstats | tr -d '\r' |
        awk -F'[:=,]' '$1 ~ /^cmdstat_(evalsha|evalsha_ro|eval|eval_ro|blpop)$/ { s += $3 } END { print s + 0 }'
}
# ps_run APP DIR N PROBES ENV...: N single-threaded workers of pool APP, limit 4, sharing in DIR;
# waits for them; per_grant = Redis commands per probe they ran.
ps_run() {
    pr_app=$1 pr_dir=$2 pr_n=$3 pr_probes=$4
    shift 4
    mark
    pr_c0=$(redis_calls)
    i=0
    while [ $i -lt "$pr_n" ]; do
        wargs="-n $pr_probes -s 5" spawn "$work/$pr_app.out.$i" PGAPPNAME="$pr_app" \
            DBTHROTTLE_POOL="$pr_app" DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR="$pr_dir" "$@"
        i=$((i + 1))
    done
    wait_workers_counted
    pr_bad=$bad_exits pr_how=$bad_how
    pr_calls=$(($(redis_calls) - pr_c0))
    pr_probes_run=$(probes "$pr_app")
    per_grant=$(awk -v c="$pr_calls" -v g="$pr_probes_run" 'BEGIN { printf "%.2f", g ? c / g : 99 }')
}

# (a) 16 processes, one host, limit 4: never more than 4 at the server; far below one Redis
# command per grant under steady contention (the same without sharing: about 3).
mkdir -p "$work/hostA" "$work/hostB" && chmod 700 "$work/hostA" "$work/hostB"
ps_run psa "$work/hostA" 16 40
check "processes_share_a_host: 16 processes exited cleanly, $pr_probes_run of 640 probes ran ($pr_bad bad exits$pr_how)" \
    '[ "$pr_bad" -eq 0 ] && [ "$pr_probes_run" -eq 640 ]'
check "processes_share_a_host: shared: at most 4 at once at the server (most seen: $(max_conc psa))" '[ "$(max_conc psa)" -le 4 ]'
check "processes_share_a_host: shared: $per_grant Redis commands per grant ($pr_calls for $pr_probes_run), below 1" \
    "awk 'BEGIN { exit !($per_grant < 1) }'"
shared_per_grant=$per_grant
nothing_left
ps_run psoff "$work/hostA" 16 40 DBTHROTTLE_HOST_SHARE=off
info "processes_share_a_host: not shared (DBTHROTTLE_HOST_SHARE=off): $per_grant Redis commands per grant ($pr_calls for $pr_probes_run); shared: $shared_per_grant"
check "processes_share_a_host: not shared: at most 4 at once (most seen: $(max_conc psoff))" '[ "$(max_conc psoff)" -le 4 ]'
nothing_left

# (b) two hosts (two share directories) of 4 processes each: the limit holds across them, and
# neither host's passing starves the other: every worker of both finishes.
mark
i=0
while [ $i -lt 4 ]; do
    for h in A B; do
        wargs="-n 30 -s 5" spawn "$work/ps2$h.out.$i" PGAPPNAME=ps2 DBTHROTTLE_POOL=ps2 \
            DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR="$work/host$h"
    done
    i=$((i + 1))
done
bad=0
for p in $spawned_list; do wait "$p" || bad=$((bad + 1)); done
spawned_list=
oka=$(sum_field ok "$work"/ps2A.out.*)
okb=$(sum_field ok "$work"/ps2B.out.*)
check "processes_share_a_host: two hosts: each finished ($oka and $okb of 120 probes; $bad bad exits)" \
    '[ "$bad" -eq 0 ] && [ "$oka" -eq 120 ] && [ "$okb" -eq 120 ]'
check "processes_share_a_host: two hosts: at most 4 at once at the server (most seen: $(max_conc ps2))" '[ "$(max_conc ps2)" -le 4 ]'
nothing_left

# (c) kills: 6 processes (lease 1 s) run 30 ms probes until stopped; one waiting and one holding
# (by chance: each is either at any time) are SIGKILLed, twice over. The others go on, and once
# all end, Redis holds nothing within lease + lease/3.
mark
i=0
while [ $i -lt 6 ]; do
    wargs="-s 30" spawn "$work/psk.out.$i" PGAPPNAME=psk DBTHROTTLE_POOL=psk DBTHROTTLE_MAX_QUERIES=2 \
        DBTHROTTLE_LEASE=1s DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR="$work/hostA"
    eval "psk_pid$i=$spawned"
    i=$((i + 1))
done
wait_until 10 '[ "$(probes psk)" -ge 20 ]'
kill -9 "$psk_pid0" "$psk_pid1" 2>/dev/null
before=$(probes psk)
wait_until 10 "[ \"\$(probes psk)\" -ge $((before + 20)) ]"
kill -9 "$psk_pid2" 2>/dev/null
before=$(probes psk)
wait_until 10 "[ \"\$(probes psk)\" -ge $((before + 20)) ]"
after=$(probes psk)
check "processes_share_a_host: kills: the others go on after 3 SIGKILLs ($before probes, then $after)" \
    "[ $after -ge $((before + 20)) ]"
for i in 3 4 5; do eval "kill -TERM \$psk_pid$i"; done
for p in $spawned_list; do wait "$p" 2>/dev/null; done
spawned_list=
check "processes_share_a_host: kills: at most 2 at once at the server (most seen: $(max_conc psk))" '[ "$(max_conc psk)" -le 2 ]'
wait_until 5 '[ "$(live_holders)" -eq 0 ] && [ "$(live_waiters)" -eq 0 ]'
check "processes_share_a_host: kills: Redis holds and queues nothing within lease + lease/3 ($waited_ms ms, at most 1333)" \
    '[ "$(live_holders)" -eq 0 ] && [ "$(live_waiters)" -eq 0 ] && [ "$waited_ms" -le 1333 ]'

# (d) DBTHROTTLE_HOST_SHARE=off: the plain cid in Redis' queue ids (no "<G>~"); on: grouped.
queue_ids() { rcli --raw --scan --pattern "*{$1}:q:wexp" | while read -r k; do rcli --raw zrange "$k" 0 -1; done; }
for mode in on off; do
    mark
    i=0
    while [ $i -lt 6 ]; do
        wargs="-n 10 -s 60" spawn "$work/psd$mode.out.$i" PGAPPNAME=psd$mode DBTHROTTLE_POOL=psd$mode \
            DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR="$work/hostA" DBTHROTTLE_HOST_SHARE=$mode
        i=$((i + 1))
    done
    wait_until 10 "[ -n \"\$(queue_ids psd$mode)\" ]"
    ids=$(queue_ids psd$mode | tr '\n' ' ')
    for p in $spawned_list; do wait "$p"; done
    spawned_list=
    if [ $mode = on ]; then
        check "processes_share_a_host: sharing on: queued ids are the host group's (<G>~<cid>...: $ids)" \
            'echo "$ids" | grep -q "^[0-9a-f]\{16\}~[0-9a-f]\{16\}\."'
    else
        check "processes_share_a_host: sharing off: queued ids have the plain cid ($ids)" \
            '[ -n "$ids" ] && ! echo "$ids" | grep -q "~"'
    fi
done
nothing_left

# (e) a share directory that cannot be used (missing): one line per process, and the processes
# throttle unshared. (A per-user directory that is not the user's own is used by none:
# other_users_cannot_stall_sharing.)
rm -rf "$work/hostbad"
mark
i=0
while [ $i -lt 4 ]; do
    env LD_PRELOAD="$preload" PGAPPNAME=pse DBTHROTTLE_POOL=pse DBTHROTTLE_MAX_QUERIES=2 \
        DBTHROTTLE_HOST_SHARE=on DBTHROTTLE_SHARE_DIR="$work/hostbad/" DBTHROTTLE_LOG_LEVEL=info "$worker" -n 10 -s 5 \
        >"$work/pse.out.$i" 2>"$work/pse.err.$i" &
    eval "pse_pid$i=$!"
    i=$((i + 1))
done
bad=0
for i in 0 1 2 3; do eval "wait \$pse_pid$i" || bad=$((bad + 1)); done
lines=$(cat "$work"/pse.err.* | grep -c "host_share_unavailable")
check "processes_share_a_host: a bad share dir: one warning per process ($lines for 4), all ran ($(sum_field ok "$work"/pse.out.*) of 40)" \
    '[ "$lines" -eq 4 ] && [ "$bad" -eq 0 ] && [ "$(sum_field ok "$work"/pse.out.*)" -eq 40 ]'
check "processes_share_a_host: a bad share dir: at most 2 at once (most seen: $(max_conc pse))" '[ "$(max_conc pse)" -le 2 ]'
nothing_left
