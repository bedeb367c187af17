# transaction_is_one_permit.sh - a transaction is one permit, a single command one too
it_transaction_is_one_permit() {
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG=$work/trace2.log DBTHROTTLE_LOG_LEVEL=info \
        psql -qAt -c "begin" -c "select 1" -c "update r set v = v where id = 1" -c "commit" >/dev/null
    grants=$(grep -c 'event=grant' "$work/trace2.log")
    releases=$(grep -c 'event=release' "$work/trace2.log")
    check "BEGIN ... COMMIT over four commands takes one grant (saw $grants)" [ "$grants" -eq 1 ]
    check "and gives it back once (saw $releases)" [ "$releases" -eq 1 ]
    grants=$(throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=info \
        psql -qAt -c "select 1" 2>&1 >/dev/null | grep -c 'event=grant')
    check "a single psql -c command takes one grant (saw $grants)" [ "$grants" -eq 1 ]
}
