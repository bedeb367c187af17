# status_true_under_host_sharing.sh - with host sharing (on by default) a permit passes from one
# process of the host to the next without Redis. dbthrottle status must still mean what its
# headers say, judged against what the server saw: HELD is the named holder's own time (not the
# permit's age across processes), the hold histogram counts each statement's hold once, and
# `cancelled` counts only waiters that gave up (none here).
it_status_true_under_host_sharing() {
    st_env="DBTHROTTLE_POOL=st DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=1500ms PGAPPNAME=st"
    st_n=5
    st_ms=1500
    mark
    st_pids=
    i=0
    while [ $i -lt $st_n ]; do
        # shellcheck disable=SC2086
        throttled $st_env psql -qAtX -c "select dbt_probe($st_ms)" >"$work/st.$i.out" 2>&1 &
        st_pids="$st_pids $!"
        i=$((i + 1))
    done
    # While they take turns: status' holder (its HELD and its backend), then the server's age of
    # that backend's statement, read after it (so never younger than at status' reading). A
    # holder's HELD counts from its grant, which comes before its statement starts: at most the
    # statement's age plus the time from the grant to the statement (slack). An entry that still
    # names a backend whose statement ended (until its successor's renewal) is not judged.
    st_judged=0
    st_bad=
    st_t0=$(now_ms)
    while [ $(($(now_ms) - st_t0)) -lt 30000 ] && ! holds_ended_st; do
        st_row=$("$top/build/dbthrottle" status st --json --redis "redis://127.0.0.1:$rport" 2>/dev/null |
            $py -c 'import json,sys
d = json.load(sys.stdin)
for p in d["pools"]:
    for h in p["queries"]["holders"]:
        print(h["held_ms"], h.get("backend_pid") or "")' 2>/dev/null | head -n 1)
        st_held=${st_row% *}
        st_backend=${st_row#* }
        if [ -n "$st_row" ] && [ -n "$st_backend" ]; then
            st_age=$(psql -qAtX -c "select (extract(epoch from clock_timestamp() - query_start) * 1000)::int from pg_stat_activity where pid = $st_backend and state = 'active' and query like '%dbt_probe%'")
            if [ -n "$st_age" ]; then
                st_judged=$((st_judged + 1))
                [ "$st_held" -le $((st_age + 700)) ] || st_bad="$st_bad held=${st_held}ms/statement=${st_age}ms"
            fi
        fi
        sleep 0.1
    done
    for p in $st_pids; do wait "$p"; done
    st_ran=$(probes st)
    check "status under host sharing: $st_n statements ran ($st_ran), one at a time ($(max_conc st))" \
        '[ "$st_ran" -eq $st_n ] && [ "$(max_conc st)" -eq 1 ] && ! grep -qi error "$work"/st.*.out'
    check "status under host sharing: HELD never exceeded the named holder's statement by more than 700 ms ($st_judged samples judged:${st_bad:- none over})" \
        '[ "$st_judged" -ge 5 ] && [ -z "$st_bad" ]'
    # Every hold ended (released to Redis, or passed on by the host): one observation each.
    wait_until 10 'nothing_left'
    st_hist=$("$top/build/dbthrottle" status st --json --redis "redis://127.0.0.1:$rport" |
        $py -c 'import json,sys
d = json.load(sys.stdin)
q = d["pools"][0]["queries"]
n = s = 0
for h in q["histograms"]:
    if h["series"] == "hold":
        n += h["count"]; s += h["sum_ms"]
print(n, s, q["counters"]["cancelled"])')
    st_holds=$(echo "$st_hist" | cut -d ' ' -f 1)
    st_sum=$(echo "$st_hist" | cut -d ' ' -f 2)
    st_cancelled=$(echo "$st_hist" | cut -d ' ' -f 3)
    check "status under host sharing: the hold histogram counts $st_n holds of $st_ms-$((st_ms + 700)) ms each (count $st_holds, sum $st_sum ms)" \
        '[ "$st_holds" -eq $st_n ] && [ "$st_sum" -ge $((st_n * st_ms)) ] && [ "$st_sum" -le $((st_n * (st_ms + 700))) ]'
    check "status under host sharing: nothing was cancelled, and cancelled says $st_cancelled" '[ "$st_cancelled" -eq 0 ]'
    # A waiter that does give up (its wait timeout, behind a holder of the host) is counted.
    hold_begin st_holder DBTHROTTLE_POOL=st DBTHROTTLE_MAX_QUERIES=1
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{st}:q:holders")" = 1 ]'
    # shellcheck disable=SC2086
    throttled $st_env DBTHROTTLE_WAIT_TIMEOUT=500ms psql -qAtX -c "select 1" >"$work/st.timeout.out" 2>&1
    st_cancelled=$(rcli --raw hget "dbthrottle:{st}:q:stats" cancelled)
    hold_end st_holder
    check "status under host sharing: a waiter whose wait timed out ($(head -c 100 "$work/st.timeout.out")) is counted as cancelled (${st_cancelled:-none})" \
        'grep -q "timeout\|timed out" "$work/st.timeout.out" && [ "${st_cancelled:-0}" -eq 1 ]'
}
holds_ended_st() { for p in $st_pids; do ! kill -0 "$p" 2>/dev/null || return 1; done; }
