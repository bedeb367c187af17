# query_longer_than_lease.sh - a query 5x longer than the lease keeps its permit: the renewal thread renews while the
# program blocks in libpq, and nobody is admitted in its place.
echo "# query_longer_than_lease: a query 5x longer than the lease (1 s)"
mark
c3="PGAPPNAME=c3 DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=1s"
wargs="-n 1 -s 5000" spawn "$work/c3.long" $c3 DBTHROTTLE_LOG="$work/c3.long.log" DBTHROTTLE_LOG_LEVEL=info
long=$spawned
wait_until 10 '[ "$(live_holders)" -eq 1 ]'
ql_granted=$(date +%s%N)
wargs="-n 1 -s 0" spawn "$work/c3.short" $c3 DBTHROTTLE_LOG="$work/c3.short.log"
short=$spawned
# The other queued first (under ASan beside make test's other lanes, its start once took longer
# than the 2.5 s a fixed sleep gave it), then the long probe is 2.5 leases old at least: its
# permit has been renewed twice. It runs 5 s, so it still holds then.
wait_until 4 '[ "$(live_waiters)" -eq 1 ]'
ql_left=$((2500 - ($(date +%s%N) - ql_granted) / 1000000))
[ "$ql_left" -le 0 ] || sleep "$(printf '%d.%03d' $((ql_left / 1000)) $((ql_left % 1000)))"
held=$(live_holders)
waiting=$(live_waiters)
wait "$long" "$short"
conc=$(max_conc c3)
short_ms=$(max_field max_call_ms "$work/c3.short")
check "query_longer_than_lease: at 2.5 leases the long query still held its permit and the other waited (holders $held, waiters $waiting)" '[ "$held" -eq 1 ] && [ "$waiting" -eq 1 ]'
check "query_longer_than_lease: never 2 at once at the server (most seen: $conc), both ran ($(probes c3) probes)" '[ "$conc" -eq 1 ] && [ "$(probes c3)" -eq 2 ]'
check "query_longer_than_lease: the other waited for the long query to end ($short_ms ms)" '[ "$short_ms" -ge 2000 ]'
check "query_longer_than_lease: the long query's permit was given back, and no lease was lost" 'grep -q "event=release" "$work/c3.long.log" && ! cat "$work/c3.long.log" "$work/c3.short.log" 2>/dev/null | grep -q "lease_lost"'
