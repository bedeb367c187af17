# cache_permits.sh - DBTHROTTLE_CACHE_PERMITS: one grant for back-to-back commands
it_cache_permits() {
    # DBTHROTTLE_CACHE_PERMITS=on: back-to-back commands of one connection share one grant; the permit
    # goes back by itself once idle, before the program ends.
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=debug DBTHROTTLE_CACHE_PERMITS=on \
        DBTHROTTLE_LOG=$work/cache.log psql -qAt -c "select 1" -c "select 2" -c "select 3" \
        -c "select pg_sleep(0.3)" -c "select 4" >/dev/null
    grants=$(grep -c 'event=grant' "$work/cache.log")
    reuses=$(grep -c 'event=reuse' "$work/cache.log")
    check "CACHE_PERMITS=on: 5 commands of one psql, 1 grant and 4 reuses (saw $grants, $reuses)" \
        '[ "$grants" -eq 1 ] && [ "$reuses" -eq 4 ] && [ "$(grep -c "event=release" "$work/cache.log")" -eq 1 ]'
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_CACHE_PERMITS=on \
        DBTHROTTLE_CACHE_IDLE=100ms DBTHROTTLE_LOG=$work/cache_idle.log \
        psql -qAt -c "select 1" -c '\! sleep 1' -c "select 2" >/dev/null
    check "CACHE_PERMITS=on, CACHE_IDLE=100ms: a permit idle for 1 s went back by itself, and the next command took a new one" \
        'grep -q "event=release.*reason=\"kept idle for DBTHROTTLE_CACHE_IDLE\"" "$work/cache_idle.log" && [ "$(grep -c "event=grant" "$work/cache_idle.log")" -eq 2 ]'
}
