# host_cut_off.sh - a host vanishes. Workers in a network namespace of their own reach Redis and PostgreSQL
# over a veth pair with addresses of this test's own; one holds a permit idle in a transaction,
# one waits. The link is cut: the workers outside must be granted within lease + lease/3 + 1 s,
# the cut ones must not crash, and when the link returns the holder must queue again rather than
# go on with a permit Redis gave away. ON_REDIS_ERROR=closed, so the cut waiter is refused
# rather than run unthrottled (what open would do, as documented).
echo "# host_cut_off: a network namespace cut off while holding and waiting"
ns=dbt8$$
net=10.$(( $$ % 200 + 20 )).$(rand 250)
netns_cleanup() {
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    ip link del "v${ns}a" 2>/dev/null
}
if ! ip netns add "$ns" 2>"$work/netns.err"; then
    fail "host_cut_off: cannot make a network namespace: $(cat "$work/netns.err")"
else
    ip link add "v${ns}a" type veth peer name "v${ns}b"
    ip link set "v${ns}b" netns "$ns"
    ip addr add "$net.1/30" dev "v${ns}a"
    ip link set "v${ns}a" up
    ip netns exec "$ns" ip addr add "$net.2/30" dev "v${ns}b"
    ip netns exec "$ns" ip link set "v${ns}b" up
    ip netns exec "$ns" ip link set lo up
    # Redis and PostgreSQL listen on the veth address too.
    redis_stop
    redis_start --bind "127.0.0.1 $net.1" --protected-mode no # the address is this test's own
    echo "host all all $net.0/30 trust" >>"$work/pg/data/pg_hba.conf"
    psql -qAtX -c "ALTER SYSTEM SET listen_addresses = '127.0.0.1,$net.1'" >/dev/null
    pg_restart
    c8="PGAPPNAME=c8 DBTHROTTLE_POOL=c8 DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LEASE=2s DBTHROTTLE_REDIS_TIMEOUT=300ms DBTHROTTLE_ON_REDIS_ERROR=closed"
    inside() { # inside OUT ARGS...: a worker in the namespace
        out=$1
        shift
        ip netns exec "$ns" env LD_PRELOAD="$preload" PGHOST="$net.1" DBTHROTTLE_REDIS_URL="redis://$net.1:$rport" \
            $c8 "$@" >"$out" 2>>"$work/workers.err" &
        spawned=$!
        spawned_list="${spawned_list:-} $spawned"
        echo "$spawned" >>"$work/pids"
    }
    mark
    wargs="-n 1 -s 12000" spawn "$work/c8.h" $c8 # outside: holds the other permit all along
    wait_until 10 '[ "$(live_holders)" -eq 1 ]'
    inside "$work/c8.a" DBTHROTTLE_LOG="$work/c8.a.log" DBTHROTTLE_LOG_LEVEL=debug "$worker" -n 1 -x 8000 -W "$work/c8.a.ready"
    a=$spawned
    wait_until 10 '[ -e "$work/c8.a.ready" ]'
    inside "$work/c8.w" "$worker" -n 1 -s 0 # inside: waits
    wait_until 10 '[ "$(live_waiters)" -eq 1 ]'
    wargs="-n 1 -s 9000" spawn "$work/c8.r" $c8 DBTHROTTLE_LOG="$work/c8.r.log" DBTHROTTLE_LOG_LEVEL=info # outside: waits behind it
    wait_until 10 '[ "$(live_waiters)" -eq 2 ]'
    t_cut=$(now_ms)
    ip link set "v${ns}a" down
    wait_until 10 'grep -q "event=grant" "$work/c8.r.log"' # its trace says when
    granted_ms=$(( $(now_ms) - t_cut ))
    sleep 1
    w_left=$(live_waiters)
    ip link set "v${ns}a" up
    t_up=$(now_ms)
    crashed=0
    for p in $spawned_list; do wait "$p" || crashed=$((crashed + 1)); done
    spawned_list=
    conc=$(max_conc c8)
    a_ms=$(max_field max_call_ms "$work/c8.a")
    w_codes=$(cat "$work/c8.w")
    check "host_cut_off: outside, the waiter was granted $granted_ms ms after the cut (bound 2000 + 667 + 1000)" '[ "$granted_ms" -le 3667 ]'
    check "host_cut_off: the cut waiter's place was dropped while cut (waiters then: $w_left, the outside one granted)" '[ "$w_left" -eq 0 ]'
    check "host_cut_off: no worker crashed ($crashed bad exits); the cut waiter was refused, as closed says ($w_codes)" '[ "$crashed" -eq 0 ] && echo "$w_codes" | grep -q "codes=53300:1"'
    check "host_cut_off: the cut holder logged its lost lease and queued again when the link returned" 'grep -q "event=lease_lost" "$work/c8.a.log" && grep -q "event=reacquire" "$work/c8.a.log" && [ "$a_ms" -ge 1000 ]'
    check "host_cut_off: never more than 2 at once at the server (most seen: $conc), the holder's work done" '[ "$conc" -le 2 ] && [ "$(sum_field ok "$work/c8.a")" -eq 1 ]'
    netns_cleanup
fi
