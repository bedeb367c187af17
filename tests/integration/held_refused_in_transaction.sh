# held_refused_in_transaction.sh - b. the same inside a transaction block: the transaction's permit
# is evicted (the next command then queues again, design.md), the holder takes it, the held command
# is refused: still INTRANS
it_held_refused_in_transaction() {
    mark
    hc_run held_btx refuse_in_tx DBTHROTTLE_WAIT_TIMEOUT=1500ms DBTHROTTLE_LEASE=600ms
    hc_line tx_before
    permit=$(rcli zrange "dbthrottle:{held_btx}:q:holders" 0 -1 | head -1)
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=held_btx PGAPPNAME=held_btx DBTHROTTLE_LEASE=600ms \
        DBTHROTTLE_WAIT_TIMEOUT=60s psql -qAtX -c "select dbt_probe(6000)" >/dev/null 2>&1 &
    hc_holder=$!
    echo "$hc_holder" >>"$work/pids"
    wait_until 10 '[ "$(hc_card held_btx queue)" = 1 ]'
    "$top/build/dbthrottle" evict held_btx "$permit" >"$work/hc.evict.out" 2>&1
    # the holder runs; the transaction's process heard of the eviction (its renewal took the mark)
    wait_until 10 '[ "$(probes held_btx)" = 1 ] && [ -z "$(rcli hget "dbthrottle:{held_btx}:q:info" "evicted:$permit")" ]'
    check "held_btx: in a transaction (${permit:-no permit}), evicted, the holder runs ($(probes held_btx) probe)" \
        '[ -n "$permit" ] && [ "$(hc_val tx_before)" = INTRANS ] && [ "$(probes held_btx)" = 1 ]'
    hc_go evicted
    hc_line tx
    hc_sent_at_once
    check "held_btx: 53300 then NULL ($(hc_val result)), and still INTRANS ($(hc_val tx))" \
        '[ "$(hc_val result)" = "FATAL_ERROR:53300,NULL" ] && [ "$(hc_val tx)" = INTRANS ]'
    wait "$hc_holder"
    hc_go next
    wait "$hc_pid"
    rc=$?
    check "held_btx: the transaction goes on and commits ($(hc_val next) $(hc_val tx_next), $(hc_val commit) $(hc_val tx_end); rc $rc)" \
        '[ $rc -eq 0 ] && [ "$(hc_val next)" = TUPLES_OK:next ] && [ "$(hc_val tx_next)" = INTRANS ] && [ "$(hc_val commit)" = COMMAND_OK ] && [ "$(hc_val tx_end)" = IDLE ]'
    check "held_btx: the refused statement never reached the server (probes: $(probes held_btx), the holder's)" \
        '[ "$(probes held_btx)" = 1 ]'
}
