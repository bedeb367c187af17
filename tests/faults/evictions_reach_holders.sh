# evictions_reach_holders.sh - dbthrottle evict reaches the holder's process: at its next renewal
# the victim logs `evicted` (not a lease lost to an expiry or to Redis losing its data), and with
# --cancel its running command is cancelled at the server, so an eviction does not leave the limit
# + 1 statements running (pg_stat_activity no longer lists the victim's statement).
echo "# evictions_reach_holders: dbthrottle evict, and evict --cancel"
ev_env="DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=3s DBTHROTTLE_POOL=ev DBTHROTTLE_LOG_LEVEL=info"
ev_active() { psql -X -At -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$1' AND state = 'active'"; }
# ev_case NAME [--cancel]: a victim runs a 30 s statement holding the only permit; it is evicted.
ev_case() {
    ev_name=$1
    shift
    env LD_PRELOAD="$preload" $ev_env DBTHROTTLE_LOG="$work/ev.$ev_name.log" PGAPPNAME=ev_$ev_name \
        psql -X -c "SELECT pg_sleep(30)" >"$work/ev.$ev_name.out" 2>&1 &
    ev_pid=$!
    echo "$ev_pid" >>"$work/pids"
    wait_until 10 '[ "$(live_holders)" -eq 1 ] && [ "$(ev_active ev_$ev_name)" -eq 1 ]'
    ev_permit=$(rcli zrange "dbthrottle:{ev}:q:holders" 0 -1 | head -1)
    "$top/build/dbthrottle" evict ev "$ev_permit" "$@" >"$work/ev.$ev_name.cli" 2>&1
    ev_rc=$?
}
ev_case cancel --cancel
# Within a renewal (lease/3 = 1 s) and the cancel's round trip.
wait_until 5 '[ "$(ev_active ev_cancel)" -eq 0 ]'
check "evictions_reach_holders: evict --cancel (rc $ev_rc: $(head -c 200 "$work/ev.cancel.cli")): the victim's statement is gone from pg_stat_activity (active: $(ev_active ev_cancel))" \
    '[ "$ev_rc" -eq 0 ] && [ "$(ev_active ev_cancel)" -eq 0 ]'
wait_until 10 '! kill -0 "$ev_pid" 2>/dev/null'
check "evictions_reach_holders: evict --cancel: the victim got the cancel's error ($(head -c 160 "$work/ev.cancel.out" | tr '\n' ' '))" \
    'grep -q "canceling statement due to user request" "$work/ev.cancel.out"'
check "evictions_reach_holders: evict --cancel: the victim logged evicted ($(grep -o 'event=[a-z_]*' "$work/ev.cancel.log" | sort -u | tr '\n' ' '))" \
    'grep -q "event=evicted" "$work/ev.cancel.log" && ! grep -q "expired or data lost" "$work/ev.cancel.log"'
wait "$ev_pid" 2>/dev/null

ev_case plain
wait_until 5 'grep -q "event=evicted\|event=lease_lost" "$work/ev.plain.log"'
check "evictions_reach_holders: evict (rc $ev_rc): the victim logged evicted, not a lost lease ($(grep -o 'event=[a-z_]*' "$work/ev.plain.log" | sort -u | tr '\n' ' '))" \
    '[ "$ev_rc" -eq 0 ] && grep -q "event=evicted" "$work/ev.plain.log" && ! grep -q "expired or data lost" "$work/ev.plain.log"'
check "evictions_reach_holders: evict without --cancel leaves the statement running (active: $(ev_active ev_plain))" '[ "$(ev_active ev_plain)" -eq 1 ]'
psql -X -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'ev_plain'" >/dev/null
wait "$ev_pid" 2>/dev/null
wait_until 10 '[ "$(live_holders)" -eq 0 ] && [ "$(live_waiters)" -eq 0 ]'
check "evictions_reach_holders: nothing held or queued in the end" 'nothing_left'
