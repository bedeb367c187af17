# listener_dropped_is_no_outage.sh - a process that keeps a permit between commands listens for
# Redis' recall on a connection of its own (the renewer's BLPOP), for seconds at a time. The server
# (CLIENT KILL, as an operator or a proxy's idle timeout does) closes that connection a while into
# such a wait, with Redis answering throughout. The process must connect again then, not take Redis
# for unreachable: no "redis_error" ("refusing commands until Redis is back": the operator's alarm,
# and a window in which commands are refused in closed mode or run unthrottled in open mode), and
# its next acquire (a new connection's, in closed mode) is served. REDIS_TIMEOUT=200ms, so that the
# wait has outlasted it when the kill comes.
echo "# listener_dropped_is_no_outage: a listener connection closed by the server mid-wait is no outage"
ld_env="DBTHROTTLE_POOL=ld DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_TIMEOUT=200ms DBTHROTTLE_ON_REDIS_ERROR=closed DBTHROTTLE_CACHE_PERMITS=on DBTHROTTLE_CACHE_IDLE=1m DBTHROTTLE_WAIT_TIMEOUT=10s"
ld_fifo=$work/ld.fifo
mkfifo "$ld_fifo"
mark
env LD_PRELOAD="$preload" $ld_env DBTHROTTLE_SHARE_DIR="$work" PGAPPNAME=ld \
    psql -qAtX -f "$ld_fifo" >"$work/ld.out" 2>"$work/ld.err" &
ld_psql=$!
exec 7>"$ld_fifo"
echo "select dbt_probe(1);" >&7
wait_until 10 '[ "$(probes ld)" -ge 1 ] && [ "$(live_holders q "dbthrottle:{ld}")" -eq 1 ]'
# The renewer's BLPOP, a second into its wait (five times REDIS_TIMEOUT).
ld_blpop() { rcli client list | awk '/cmd=blpop/ { sub(/^id=/, "", $1); print $1 }'; }
wait_until 5 '[ -n "$(ld_blpop)" ]'
sleep 1
ld_ids=$(ld_blpop)
for id in $ld_ids; do rcli client kill id "$id" >/dev/null; done
# A new connection of the same process: its first query acquires (the kept permit was the old
# connection's), at once.
printf '%s\n' '\c' "select dbt_probe(1);" >&7
exec 7>&-
wait "$ld_psql"
ld_rc=$?
check "listener_dropped_is_no_outage: the listener's connection was killed (ids: $(echo $ld_ids)), and the next acquire of the process was served (psql rc $ld_rc, $(probes ld) probes: $(grep -o 'dbthrottle: [^.]*' "$work/ld.err" | head -1))" \
    '[ -n "$ld_ids" ] && [ "$ld_rc" -eq 0 ] && [ "$(probes ld)" -eq 2 ]'
check "listener_dropped_is_no_outage: the process took Redis for unreachable $(grep -c 'event=redis_error' "$work/ld.err") times ($(grep -o 'event=redis_error.*error="[^"]*"' "$work/ld.err" | head -1))" \
    '! grep -q "event=redis_error" "$work/ld.err"'
check "listener_dropped_is_no_outage: nothing held or queued in the end" 'nothing_left q "dbthrottle:{ld}" 15'
