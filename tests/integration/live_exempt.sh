# live_exempt.sh - exempt set live per pool (dbthrottle set POOL exempt ...): a running worker that
# its own DBTHROTTLE_EXEMPT exempts is throttled once the pool's live exempt is "none" (it queues
# behind a holder at a limit of 1: Redis queues it, the server runs only the holder), and, the
# live value cleared, its own rule exempts it again (it runs beside the holder: two statements at
# once at the server). Each step waits for the worker's record in Redis to say it applied the
# version.
it_live_exempt() {
    lx_cli() { "$top/build/dbthrottle" "$@" --redis "redis://127.0.0.1:$rport"; }
    rm -f "$work"/lx.*
    check "set exempt none (--create)" 'lx_cli set lx exempt none --create | grep -q "exempt = none, live"'
    lx_v1=$(live_version lx)
    ( echo "select 1;"
      wait_until 60 '[ -e "$work/lx.go1" ]'; echo "select 2, 'lx';"
      wait_until 60 '[ -e "$work/lx.go2" ]'; echo "select 3, 'lx';"
      wait_until 60 '[ -e "$work/lx.go3" ]'; echo "begin;"; echo "select 4, 'lx';"
      wait_until 60 '[ -e "$work/lx.go4" ]'; echo "select 5, 'lx';"; echo "commit;"
      echo "select 6, 'lx';"
      wait_until 60 '[ -e "$work/lx.end" ]' ) |
        throttled DBTHROTTLE_POOL=lx DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=3s \
            DBTHROTTLE_EXEMPT=application_name=lx_w PGAPPNAME=lx_w \
            psql -qAtX >"$work/lx.out" 2>"$work/lx.err" &
    lx_w=$!
    echo $lx_w >>"$work/pids"
    wait_until 20 '[ "$(live_applied lx)" = "$lx_v1" ]'
    check "the worker applied the live exempt=none, version $lx_v1 ($(live_applied lx))" '[ "$(live_applied lx)" = "$lx_v1" ]'
    hold_begin lx_holder DBTHROTTLE_POOL=lx DBTHROTTLE_MAX_QUERIES=1
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lx}:q:holders")" = 1 ] && [ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '"'lx_holder'"' and state = '"'active'"'")" ]'
    touch "$work/lx.go1"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lx}:q:queue")" = 1 ]'
    check "its own rule lifted, the worker queues behind the holder (Redis' queue: $(rcli zcard "dbthrottle:{lx}:q:queue"); output so far: $(tr '\n' ' ' <"$work/lx.out"))" \
        '[ "$(rcli zcard "dbthrottle:{lx}:q:queue")" = 1 ] && ! grep -q "^2|lx$" "$work/lx.out"'
    # A one-shot process (psql -c) its own rule exempts: its only command hears the live none
    # before it decides, and queues too (a stranger's find: it ran beside the holder).
    throttled DBTHROTTLE_POOL=lx DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=3s \
        DBTHROTTLE_EXEMPT=application_name=lx_once PGAPPNAME=lx_once \
        psql -qAtX -c "select 7, 'lx'" >"$work/lx.once" 2>&1 &
    lx_once=$!
    echo $lx_once >>"$work/pids"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lx}:q:queue")" = 2 ]'
    check "a one-shot process its own rule exempts queues too (queue: $(rcli zcard "dbthrottle:{lx}:q:queue"); its output: $(cat "$work/lx.once"))" \
        '[ "$(rcli zcard "dbthrottle:{lx}:q:queue")" = 2 ] && ! grep -q "^7|lx$" "$work/lx.once"'
    hold_end_all
    wait "$lx_once"
    wait_until 20 'grep -q "^2|lx$" "$work/lx.out"'
    check "the holder gone, they ran" 'grep -q "^2|lx$" "$work/lx.out" && grep -q "^7|lx$" "$work/lx.once"'
    lx_cli set lx exempt --clear >/dev/null
    lx_v2=$(live_version lx)
    wait_until 20 '[ "$(live_applied lx)" = "$lx_v2" ]'
    check "the live exempt cleared: the worker applied version $lx_v2 ($(live_applied lx))" '[ "$lx_v2" != "$lx_v1" ] && [ "$(live_applied lx)" = "$lx_v2" ]'
    hold_begin lx_holder DBTHROTTLE_POOL=lx DBTHROTTLE_MAX_QUERIES=1
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lx}:q:holders")" = 1 ] && [ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '"'lx_holder'"' and state = '"'active'"'")" ]'
    touch "$work/lx.go2"
    wait_until 20 'grep -q "^3|lx$" "$work/lx.out"'
    lx_holding=$(psql -qAtX -c "select count(*) from pg_stat_activity where application_name = 'lx_holder' and state = 'active'")
    check "its own rule exempts it again: it ran beside the holder (ran: $(grep -c "^3|lx$" "$work/lx.out"); holder still running: $lx_holding; Redis' queue: $(rcli zcard "dbthrottle:{lx}:q:queue"))" \
        'grep -q "^3|lx$" "$work/lx.out" && [ "$lx_holding" = 1 ]'
    # dbthrottle clients says what it is: exempt (it listed an exempt connection as idle, even
    # while it ran)
    lx_state() {
        lx_cli clients lx --json | $py -c 'import json, sys
for p in json.load(sys.stdin)["pools"][0]["processes"]:
    for c in p["connections"]:
        if c["application"] == "lx_w": print(c["state"])'
    }
    wait_until 5 '[ "$(lx_state)" = exempt ]'
    check "clients lists the exempt connection as exempt ($(lx_state))" '[ "$(lx_state)" = exempt ]'
    # Exempt, it opens a transaction (beside the holder: it takes no permit); the exemption is
    # lifted live meanwhile. Its next statement in the transaction still runs at once (queued, it
    # would wait while its transaction holds its locks); after the commit, it queues.
    touch "$work/lx.go3"
    wait_until 20 'grep -q "^4|lx$" "$work/lx.out"'
    lx_cli set lx exempt none >/dev/null
    lx_v3=$(live_version lx)
    wait_until 20 '[ "$(live_applied lx)" = "$lx_v3" ]'
    touch "$work/lx.go4"
    wait_until 20 'grep -q "^5|lx$" "$work/lx.out"'
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{lx}:q:queue")" = 1 ]'
    lx_holding=$(psql -qAtX -c "select count(*) from pg_stat_activity where application_name = 'lx_holder' and state = 'active'")
    check "lifted live inside its transaction (applied: $(live_applied lx) of $lx_v3), its statement there ran beside the holder, and the one after the commit queues (ran: $(grep -c "^[45]|lx$" "$work/lx.out") of 2; queue: $(rcli zcard "dbthrottle:{lx}:q:queue"); holder running: $lx_holding)" \
        'grep -q "^5|lx$" "$work/lx.out" && ! grep -q "^6|lx$" "$work/lx.out" && [ "$(rcli zcard "dbthrottle:{lx}:q:queue")" = 1 ] && [ "$lx_holding" = 1 ]'
    hold_end_all
    wait_until 20 'grep -q "^6|lx$" "$work/lx.out"'
    touch "$work/lx.end"
    wait "$lx_w"
}
