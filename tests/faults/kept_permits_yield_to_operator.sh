# kept_permits_yield_to_operator.sh - a permit kept between commands (DBTHROTTLE_CACHE_PERMITS=on)
# serves its connection's next command without asking Redis, so the operator's controls must reach
# it: `dbthrottle drain --wait` returns once the kept permits are given back (they are not left
# running in a drained pool: no statement of theirs starts at the server until resume), and a limit
# lowered below what is kept is kept at the server. Workers here run their statements back to back,
# so no idle period (DBTHROTTLE_CACHE_IDLE) and no other waiter would ever take their permits back.
echo "# kept_permits_yield_to_operator: drain and limit reach permits kept between commands"
ky_env="DBTHROTTLE_CACHE_PERMITS=on DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_POOL=ky DBTHROTTLE_WAIT_TIMEOUT=60s DBTHROTTLE_LEASE=3s"
D="$top/build/dbthrottle"

# ---- drain --------------------------------------------------------------------------------------
wargs="-n 0 -s 1" spawn "$work/ky.drain" PGAPPNAME=ky_drain $ky_env
ky_w=$spawned
mark
wait_until 10 '[ "$(probes ky_drain)" -ge 20 ] && [ "$(live_holders q "dbthrottle:{ky}")" -eq 1 ]'
"$D" drain ky --queries --wait --timeout 8s >"$work/ky.drain.out" 2>&1
ky_rc=$?
check "kept_permits_yield_to_operator: drain --wait returns 0 while a worker runs statements back to back on a kept permit (rc $ky_rc: $(tail -1 "$work/ky.drain.out" | head -c 200))" \
    '[ "$ky_rc" -eq 0 ] && [ "$(live_holders q "dbthrottle:{ky}")" -eq 0 ]'
# A statement sent before the permit went back may still be starting: counted from a moment later.
sleep 0.3
mark
sleep 1.5
ky_n=$(probes ky_drain)
check "kept_permits_yield_to_operator: while drained, no statement of the worker starts at the server (saw $ky_n in 1.5 s) and it waits in the queue" \
    '[ "$ky_n" -eq 0 ] && [ "$(live_waiters q "dbthrottle:{ky}")" -eq 1 ]'
"$D" resume ky >/dev/null 2>&1
wait_until 10 '[ "$(probes ky_drain)" -ge 20 ]'
check "kept_permits_yield_to_operator: after resume the worker runs again ($(probes ky_drain) statements)" '[ "$(probes ky_drain)" -ge 20 ]'
# A drain whose revoke push was lost (here: the drain key set by hand, so no push at all): the
# worker's next renewal (lease/3 = 1 s) says the pool is drained, and the kept permit goes back.
wait_until 10 '[ "$(live_holders q "dbthrottle:{ky}")" -eq 1 ]'
rcli set "dbthrottle:{ky}:q:drain" 1 >/dev/null
wait_until 10 '[ "$(live_holders q "dbthrottle:{ky}")" -eq 0 ]'
check "kept_permits_yield_to_operator: a drain without its push (the key set by hand) reaches the kept permit at the next renewal (held: $(live_holders q "dbthrottle:{ky}"))" \
    '[ "$(live_holders q "dbthrottle:{ky}")" -eq 0 ] && [ "$(live_waiters q "dbthrottle:{ky}")" -eq 1 ]'
"$D" resume ky >/dev/null 2>&1
kill -TERM "$ky_w" 2>/dev/null
wait_workers

# ---- a lower limit ------------------------------------------------------------------------------
# Two workers at a limit of 2 each keep their permit: nobody queues, so without a revoke from the
# operator's limit both would go on at 2 against a limit of 1.
wargs="-n 0 -s 2" spawn "$work/ky.l1" PGAPPNAME=ky_limit $ky_env
wargs="-n 0 -s 2" spawn "$work/ky.l2" PGAPPNAME=ky_limit $ky_env
mark
wait_until 10 '[ "$(max_conc ky_limit)" -ge 2 ] && [ "$(live_holders q "dbthrottle:{ky}")" -eq 2 ]'
info "before the limit: $(max_conc ky_limit) statements at once, $(live_holders q "dbthrottle:{ky}") permits held"
"$D" limit ky 1 >/dev/null 2>&1
sleep 0.3
mark
sleep 2
ky_max=$(max_conc ky_limit)
ky_n=$(probes ky_limit)
check "kept_permits_yield_to_operator: limit lowered to 1 under two kept permits: at most 1 statement at once at the server since (saw $ky_max over $ky_n statements)" \
    '[ "$ky_max" -le 1 ] && [ "$ky_n" -ge 20 ]'
"$D" limit ky --clear >/dev/null 2>&1
wait_until 10 '[ "$(probes ky_limit)" -ge 20 ]'
for p in $spawned_list; do kill -TERM "$p" 2>/dev/null; done
wait_workers

# ---- an eviction --------------------------------------------------------------------------------
# A permit evicted while its keeper runs statements back to back on it. Nobody waits, so no
# waiter's recall takes it back; Redis gives its unit to the next caller at once. The keeper must
# not go on using it until its next renewal (lease/3: 10 s here, so that the renewal cannot be
# what stops it): at most 1 statement at once at the server once the evicted statement ended.
ke_env="DBTHROTTLE_CACHE_PERMITS=on DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=ke DBTHROTTLE_WAIT_TIMEOUT=60s DBTHROTTLE_LEASE=30s"
wargs="-n 0 -s 2" spawn "$work/ke.1" PGAPPNAME=ky_evict $ke_env
mark
wait_until 10 '[ "$(probes ky_evict)" -ge 20 ] && [ "$(live_holders q "dbthrottle:{ke}")" -eq 1 ]'
ke_id=$(rcli zrange "dbthrottle:{ke}:q:holders" 0 0)
"$D" evict ke "$ke_id" >"$work/ke.evict.out" 2>&1
ke_rc=$?
wargs="-n 0 -s 2" spawn "$work/ke.2" PGAPPNAME=ky_evict $ke_env
# The evicted permit's statement then running ends within its 2 ms: counted from a moment later.
sleep 0.2
mark
sleep 2
ke_max=$(max_conc ky_evict)
ke_n=$(probes ky_evict)
check "kept_permits_yield_to_operator: a kept permit evicted (rc $ke_rc) under a worker that runs statements back to back, a second worker started: at most 1 statement at once at the server since (saw $ke_max over $ke_n statements)" \
    '[ "$ke_rc" -eq 0 ] && [ "$ke_max" -le 1 ] && [ "$ke_n" -ge 20 ]'
for p in $spawned_list; do kill -TERM "$p" 2>/dev/null; done
wait_workers
wargs=
check "kept_permits_yield_to_operator: nothing held or queued in the end" 'nothing_left'
