# holders_show_their_session.sh - A holder's entry in Redis names the backend pid, application_name,
# user and database of its session (so it joins with pg_stat_activity), and its state follows it
# into a transaction.
it_holders_show_their_session() {
    rm -f "$work/sess.pid" "$work/sess.done"
    # The transaction stays open until the checks are done (sess.done), 30 s at most.
    ( echo "select pg_backend_pid();"; echo "begin;"; echo "select 1;"
      wait_until 30 '[ -e "$work/sess.done" ]'; echo "commit;" ) |
        PGAPPNAME='app with spaces' throttled DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_POOL=sess \
            DBTHROTTLE_LEASE=900ms psql -qAt >"$work/sess.out" 2>&1 &
    sess_bg=$!
    echo $sess_bg >>"$work/pids"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{sess}:q:holders")" = 1 ] && [ -s "$work/sess.out" ]'
    # the client's own pg_backend_pid(), pg_stat_activity's row for that application_name, and Redis'
    mine=$(head -n 1 "$work/sess.out")
    activity=$(psql -qAt -c "select pid || '/' || usename || '/' || datname from pg_stat_activity where application_name = 'app with spaces'")
    check "Redis names the holder's backend pid ($(sess_field sess 4)), the one pg_backend_pid() said ($mine)" \
        '[ -n "$mine" ] && [ "$(sess_field sess 4)" = "$mine" ]'
    check "it joins with pg_stat_activity by pid, application_name, user and database ($activity)" \
        '[ "$(sess_field sess 4)/$(sess_field sess 6)/$(sess_field sess 7)" = "$activity" ] && [ "$(sess_field sess 5)" = "app with spaces" ]'
    # idle in its transaction: the process' renewal (every lease/3) says so
    wait_until 10 '[ "$(sess_field sess 2)" = idle_tx ]'
    check "the state of a permit idle in a transaction is idle_tx ($(sess_field sess 2))" \
        '[ "$(sess_field sess 2)" = idle_tx ]'
    touch "$work/sess.done"
    wait $sess_bg
}
