# idle_in_transaction_warning.sh - a permit held idle in a transaction is reported
it_idle_in_transaction_warning() {
    rm -f "$work/trace13.log" "$work/tx13.idle"
    # Idle 1.5 s from when psql has run "select 1" (it says so by a file), not from the pipeline's
    # start: psql's own start took part of those 1.5 s under load.
    ( echo "begin;"; echo "select 1;"; echo "\\! touch $work/tx13.idle"
      wait_until 20 '[ -e "$work/tx13.idle" ]'; sleep 1.5; echo "commit;" ) |
        throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_IDLE_IN_TX_WARN=300ms DBTHROTTLE_LEASE=600ms \
            DBTHROTTLE_LOG=$work/trace13.log psql -qAt >/dev/null 2>&1
    check "idle in transaction longer than DBTHROTTLE_IDLE_IN_TX_WARN: one warning" \
        '[ "$(grep -c "level=warn event=idle_in_transaction" "$work/trace13.log")" = 1 ]'
}
