# live_exempt.sh - exempt set live per pool (dbthrottle set POOL exempt ...): a running worker that
# its own DBTHROTTLE_EXEMPT exempts is throttled once the pool's live exempt is "none" (it queues
# behind a holder at a limit of 1: Redis queues it, the server runs only the holder), and, the
# live value cleared, its own rule exempts it again (it runs beside the holder: two statements at
# once at the server). Each step waits for the worker's record in Redis to say it applied the
# version.
it_live_exempt() {
    lx_cli() { "$top/build/dbthrottle" "$@" --redis "redis://127.0.0.1:$rport"; }
    lx_applied() {
        lx_cli status lx --json | $py -c 'import json, sys
for p in json.load(sys.stdin)["processes"]:
    if p["program"] == "psql" and p["pid"] != int(sys.argv[1]): print(p["live_settings_applied"][0])' "${hold_pid:-0}" 2>/dev/null
    }
    lx_version() { v=$(rcli --raw get "dbthrottle:{lx}:settings" | sed -n '1s/^v\([0-9]*\)$/\1/p'); echo "${v:-0}"; }
    lx_active() { psql -qAtX -c "select count(*) from pg_stat_activity where application_name = '$1' and state = 'active' and query like 'select%lx%'"; }
    rm -f "$work"/lx.*
    check "set exempt none (--create)" 'lx_cli set lx exempt none --create | grep -q "exempt = none, live"'
    lx_v1=$(lx_version)
    ( echo "select 1;"
      wait_until 60 '[ -e "$work/lx.go1" ]'; echo "select 2, 'lx';"
      wait_until 60 '[ -e "$work/lx.go2" ]'; echo "select 3, 'lx';"
      wait_until 60 '[ -e "$work/lx.end" ]' ) |
        throttled DBTHROTTLE_POOL=lx DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=3s \
            DBTHROTTLE_EXEMPT=application_name=lx_w PGAPPNAME=lx_w \
            psql -qAtX >"$work/lx.out" 2>"$work/lx.err" &
    lx_w=$!
    echo $lx_w >>"$work/pids"
    wait_until 20 '[ "$(lx_applied)" = "$lx_v1" ]'
    check "the worker applied the live exempt=none, version $lx_v1 ($(lx_applied))" '[ "$(lx_applied)" = "$lx_v1" ]'
    hold_begin lx_holder DBTHROTTLE_POOL=lx DBTHROTTLE_MAX_QUERIES=1
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lx}:q:holders")" = 1 ] && [ "$(lx_active lx_holder)" = 0 ] && [ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '"'lx_holder'"' and state = '"'active'"'")" ]'
    touch "$work/lx.go1"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lx}:q:queue")" = 1 ]'
    check "its own rule lifted, the worker queues behind the holder (Redis' queue: $(rcli zcard "dbthrottle:{lx}:q:queue"); output so far: $(tr '\n' ' ' <"$work/lx.out"))" \
        '[ "$(rcli zcard "dbthrottle:{lx}:q:queue")" = 1 ] && ! grep -q "^2|lx$" "$work/lx.out"'
    hold_end_all
    wait_until 20 'grep -q "^2|lx$" "$work/lx.out"'
    check "the holder gone, it ran" 'grep -q "^2|lx$" "$work/lx.out"'
    lx_cli set lx exempt --clear >/dev/null
    lx_v2=$(lx_version)
    wait_until 20 '[ "$(lx_applied)" = "$lx_v2" ]'
    check "the live exempt cleared: the worker applied version $lx_v2 ($(lx_applied))" '[ "$lx_v2" != "$lx_v1" ] && [ "$(lx_applied)" = "$lx_v2" ]'
    hold_begin lx_holder DBTHROTTLE_POOL=lx DBTHROTTLE_MAX_QUERIES=1
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lx}:q:holders")" = 1 ] && [ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '"'lx_holder'"' and state = '"'active'"'")" ]'
    touch "$work/lx.go2"
    wait_until 20 'grep -q "^3|lx$" "$work/lx.out"'
    lx_holding=$(psql -qAtX -c "select count(*) from pg_stat_activity where application_name = 'lx_holder' and state = 'active'")
    check "its own rule exempts it again: it ran beside the holder (ran: $(grep -c "^3|lx$" "$work/lx.out"); holder still running: $lx_holding; Redis' queue: $(rcli zcard "dbthrottle:{lx}:q:queue"))" \
        'grep -q "^3|lx$" "$work/lx.out" && [ "$lx_holding" = 1 ]'
    hold_end_all
    touch "$work/lx.end"
    wait "$lx_w"
}
