# holders_state_shown_once_it_lasts.sh - a holder's state in Redis (status' STATE, its count of
# permits idle in a transaction) follows the holder within about a second once the state lasts,
# not a renewal period later: with a 60 s lease (a renewal every 20 s), a transaction that goes
# idle shows idle_tx, and running again once its next statement runs.
it_holders_state_shown_once_it_lasts() {
    rm -f "$work/hs.idle" "$work/hs.done"
    ( echo "begin;"; echo "select pg_sleep(2);"
      wait_until 30 '[ -e "$work/hs.idle" ]'; echo "select pg_sleep(60);"
      echo "commit;" ) |
        throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_POOL=hs DBTHROTTLE_LEASE=60s PGAPPNAME=hs \
            psql -qAt >"$work/hs.out" 2>&1 &
    hs_bg=$!
    echo $hs_bg >>"$work/pids"
    # its first statement runs (the process' first report, at its start, said running)
    wait_until 20 '[ "$(sess_field hs 2)" = running ] && [ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '"'hs'"' and query like '"'%pg_sleep(2)%'"' and state = '"'active'"'")" ]'
    # then idle in its transaction: shown within 10 s (a renewal period is 20 s)
    wait_until 20 '[ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '"'hs'"' and state = '"'idle in transaction'"'")" ]'
    wait_until 10 '[ "$(sess_field hs 2)" = idle_tx ]'
    hs_idle_ms=$waited_ms
    hs_state=$(sess_field hs 2)
    check "a holder idle in its transaction shows idle_tx in Redis within 10 s, a renewal period being 20 s ($hs_state after $hs_idle_ms ms)" \
        '[ "$hs_state" = idle_tx ]'
    touch "$work/hs.idle"
    wait_until 20 '[ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '"'hs'"' and query like '"'%pg_sleep(60)%'"' and state = '"'active'"'")" ]'
    wait_until 10 '[ "$(sess_field hs 2)" = running ]'
    hs_run_ms=$waited_ms
    hs_state=$(sess_field hs 2)
    check "and running again once its next statement runs ($hs_state after $hs_run_ms ms)" '[ "$hs_state" = running ]'
    psql -qAtX -c "select pg_cancel_backend(pid) from pg_stat_activity where application_name = 'hs'" >/dev/null
    wait $hs_bg
}
